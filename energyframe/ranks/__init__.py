"""Runs of several ranks: the launcher's world and the coordinator that agrees every edge (``coordinator``), and rank 0's merge of every rank's part (``merge``)."""
