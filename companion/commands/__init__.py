"""The command lines' one place that imports every chapter: each chapter's methods, joined.

An earlier chapter's tool never imports a later chapter: chapter 7's study
and chapter 8's elastic trainer take their methods as a table. Each chapter
declares its own next to its code (chapter 7 those of chapters 1-6; chapters
9, 10 and 11 their ``STUDY_METHODS``; ``companion.sharding.snapshot`` the
elastic trainer's sharded ones), and only the command lines (``python -m
companion.study``, ``python -m companion.elastic``) join them, here.
"""

from ..elastic.trainer import DDP, ElasticMethod
from ..samebits.training import STUDY_METHODS as SAMEBITS_STUDY
from ..sharding.snapshot import ELASTIC_METHODS as SHARDING_ELASTIC
from ..sharding.training import STUDY_METHODS as SHARDING_STUDY
from ..slowlinks.training import STUDY_METHODS as SLOWLINKS_STUDY
from ..study.methods import METHODS as EARLIER_STUDY
from ..study.methods import Method

__all__ = ["STUDY_METHODS", "ELASTIC_METHODS"]

# python -m companion.study --methods NAME,...: every chapter's, in book order
STUDY_METHODS: dict[str, Method] = EARLIER_STUDY | SHARDING_STUDY | SLOWLINKS_STUDY | SAMEBITS_STUDY
# python -m companion.elastic [--sharded METHOD]: chapter 8's DDP, then chapter 9's
ELASTIC_METHODS: dict[str, ElasticMethod] = {"DDP": DDP, **SHARDING_ELASTIC}
