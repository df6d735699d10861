"""Chapter 11: the same bits on any number of devices."""

from .exchange import finish_tree, fits_halving, gather_nodes, halving_doubling
from .fingerprint import Parted, ReplicaWatch, fingerprint
from .resume import resume_same_bits, save_same_bits
from .step import Flip, PieceStep, one_thread
from .training import WAYS, SameBitsResult, same_bits_worker, train_same_bits
from .tree import Node, PieceLoader, children, nodes_within, rank_pieces, tree_sum

__all__ = [
    "Node",
    "children",
    "nodes_within",
    "tree_sum",
    "rank_pieces",
    "PieceLoader",
    "gather_nodes",
    "halving_doubling",
    "fits_halving",
    "finish_tree",
    "fingerprint",
    "Parted",
    "ReplicaWatch",
    "one_thread",
    "Flip",
    "PieceStep",
    "SameBitsResult",
    "train_same_bits",
    "save_same_bits",
    "resume_same_bits",
    "same_bits_worker",
    "WAYS",
]
