"""A workload of your own, with two phases, run the way ``energyframe run`` runs it."""

import numpy as np

import energyframe as ef


class SortAndSum(ef.Workload):
    DESCRIPTION = "sort then sum a vector"
    OPTIONS = (ef.Option("n", "int", 200_000, "vector length", minimum=1),)

    def setup(self):
        self.x = np.random.default_rng(0).standard_normal(self.options["n"])

    def phases(self):
        return [
            ef.Phase("sort", step=lambda: np.sort(self.x), work={"elements": self.options["n"]}),
            ef.Phase("sum", step=lambda: self.x.sum(), work={"elements": self.options["n"]}),
        ]


if __name__ == "__main__":
    result = ef.run(
        SortAndSum(n=100_000),
        power="auto",
        reporters=["console"],
        settings=ef.RunSettings(trials=3, min_window_s=0.2, warmup_s=0.1),
    )
    print("sort:", result.summary("sort").time_per_iter_s.median, "s per call")
