"""The statistics evalkit's verdicts rest on, pure functions of counts with no evalkit imports:
`tests` (Wilson and Newcombe intervals, McNemar exact on paired questions, Fisher exact on counts,
equivalence, noise floors), `power` (the smallest effect a test can see at n, and the n a margin
needs), `multiplicity` (Holm and Benjamini-Hochberg across the cells a threshold is checked on),
`sequential` (a bisect step's anytime-valid test, decided after every batch), `noise` (how much
a series of nightly scores moves when nothing broke: robust excess spreads beyond each night's
binomial error, the t limits the history judge reads its floors from).

A new statistic goes in the module of its kind here; the judging step (evalkit/verdict/) decides
what to do with it.
"""

from evalkit.stats.multiplicity import adjust
from evalkit.stats.power import fisher_mde, fisher_n, mcnemar_mde, mcnemar_n
from evalkit.stats.tests import (
    fisher_collapse,
    newcombe_unpaired,
    noise_floor,
    paired_comparison,
    paired_equivalence,
    proportion,
    wilson_interval,
)

__all__ = [
    "adjust",
    "fisher_collapse",
    "fisher_mde",
    "fisher_n",
    "mcnemar_mde",
    "mcnemar_n",
    "newcombe_unpaired",
    "noise_floor",
    "paired_comparison",
    "paired_equivalence",
    "proportion",
    "wilson_interval",
]
