"""Evaluation: lagd's and Burrow's window rules, lag in time, and cached group verdicts."""

from lagd.evaluate.lagtime import LagTime, lag_seconds
from lagd.evaluate.rules import GroupSummary, Judgement, group_status, judge, partition_status
from lagd.evaluate.verdict_types import GroupVerdict, PartitionVerdict
from lagd.evaluate.verdicts import Evaluator

__all__ = [
    "Evaluator",
    "GroupSummary",
    "GroupVerdict",
    "Judgement",
    "LagTime",
    "PartitionVerdict",
    "group_status",
    "judge",
    "lag_seconds",
    "partition_status",
]
