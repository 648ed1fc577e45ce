"""Stand-in tensors for recorded arguments (torchops.stand_in)."""

import pytest

from energyframe.workloads.torchops import stand_in

torch = pytest.importorskip("torch")


def test_an_expanded_boolean_mask_keeps_its_strides_and_its_share_of_true():
    # a decoder's causal mask over the batch: 4 x 1 x 8 x 8 with a batch stride of 0 (expand)
    mask = stand_in((4, 1, 8, 8), (0, 64, 8, 1), torch.bool, "cpu", true_count=4 * 36)
    assert mask.shape == (4, 1, 8, 8) and mask.stride() == (0, 64, 8, 1)
    assert int(mask[0].sum()) == 36  # 36 of each 64, as recorded
    assert torch.equal(mask[0], mask[3])  # one storage under every batch row


def test_a_plain_boolean_mask_holds_exactly_the_recorded_true_count():
    mask = stand_in((3, 5), None, torch.bool, "cpu", true_count=7)
    assert int(mask.sum()) == 7
