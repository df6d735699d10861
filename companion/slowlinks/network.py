"""A simulated network: a link preset turns a byte ledger into seconds.

Used in: chapter 10.

Chapter 3 fitted a link as ``alpha + bytes * beta`` per message; chapter 9's
:class:`~companion.sharding.ledger.Ledger` lists what each rank sends, call
by call, and prices it with a pair ``(alpha, beta)``. :data:`NETWORKS` holds
pairs for links from a GPU's NVLink to a link between continents.

The bandwidths are the links' published rates (``beta = 1 / bandwidth``).
The latencies are round numbers of the right order, not measurements: for a
message of megabytes they hardly matter, and chapter 3's fit measures them
for your own link. A run projected onto a preset keeps its measured compute
and replaces its communication by what the preset would take: a
projection, not a measurement.
"""

from __future__ import annotations

from typing import NamedTuple

from ..core.checks import check_choice
from ..core.results import Record
from ..sharding.ledger import Ledger

__all__ = ["Link", "NETWORKS", "link_seconds", "projected_seconds", "time_to_accuracy"]


class Link(NamedTuple):
    """A link: latency per message (s), seconds per byte, and where the rate comes from."""

    alpha: float
    beta: float
    source: str


NETWORKS = {
    "NVLink (H100)": Link(
        5e-6, 1 / 450e9, "NVIDIA H100 datasheet: NVLink 900 GB/s per GPU, both directions together"
    ),
    "100 GbE": Link(10e-6, 1 / 12.5e9, "IEEE 802.3 100 Gbit/s Ethernet: 12.5 GB/s"),
    "10 GbE": Link(30e-6, 1 / 1.25e9, "IEEE 802.3 10 Gbit/s Ethernet: 1.25 GB/s"),
    "1 GbE": Link(50e-6, 1 / 0.125e9, "IEEE 802.3 1 Gbit/s Ethernet: 125 MB/s"),
    "WAN (1 Gbit/s, 40 ms)": Link(
        40e-3,
        1 / 0.125e9,
        "a 1 Gbit/s path between continents; light in fibre covers ~200 km per ms, so "
        "~6,000 km take 30 ms one way before any router",
    ),
}


def link_seconds(ledger: Ledger, network: str) -> float:
    """What the calls in ``ledger`` would take on the link :data:`NETWORKS` names."""
    check_choice(network, "network", NETWORKS)
    link = NETWORKS[network]
    return ledger.seconds(link.alpha, link.beta)


def _check_one_each(records: list[Record], ledgers: list[Ledger]) -> None:
    if len(records) != len(ledgers):
        raise ValueError(
            f"one ledger per epoch record is needed: {len(records)} records, "
            f"{len(ledgers)} ledgers (use SlowResult.epoch_ledgers())"
        )


def projected_seconds(records: list[Record], ledgers: list[Ledger], network: str) -> list[float]:
    """The run's time at the end of each epoch on ``network``: each epoch's measured
    seconds plus what its collectives would take there (no overlap assumed)."""
    _check_one_each(records, ledgers)
    total, out = 0.0, []
    for record, ledger in zip(records, ledgers):
        total += record.sec_per_epoch + link_seconds(ledger, network)
        out.append(total)
    return out


def time_to_accuracy(
    records: list[Record], ledgers: list[Ledger], network: str, target: float
) -> float | None:
    """Projected seconds until an epoch's test accuracy first reaches ``target``
    (``None`` if none does)."""
    if not 0 < target <= 1:
        raise ValueError(f"target must be a test accuracy in (0, 1], got {target}")
    for record, seconds in zip(records, projected_seconds(records, ledgers, network)):
        if record.test_acc >= target:
            return seconds
    return None
