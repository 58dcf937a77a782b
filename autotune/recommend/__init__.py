"""Confirming the best candidates, the recommendation JSON, its exports and applying it."""

from autotune.recommend._apply import Recommendation, load_recommendation
from autotune.recommend._batch import keeping_effective_batch, learning_rate_advice
from autotune.recommend._confirm import (
    ConfirmationRace,
    QuietObserver,
    RaceObserver,
    RacePlan,
    confirm,
)
from autotune.recommend._diagnosis import (
    TrialView,
    ceiling_numbers,
    ceiling_sentence,
    diagnose,
)
from autotune.recommend._document import build_document, speedup_sentence
from autotune.recommend._document_model import (
    SCHEMA,
    RecommendationDocument,
    recommendation_json_schema,
)
from autotune.recommend._export import exports
from autotune.recommend._pick import pick_candidates
from autotune.recommend._runs import CandidateRuns, Confirmation
from autotune.recommend._schema import validate_recommendation

__all__ = [
    "keeping_effective_batch",
    "learning_rate_advice",
    "SCHEMA",
    "CandidateRuns",
    "Confirmation",
    "ConfirmationRace",
    "QuietObserver",
    "RaceObserver",
    "RacePlan",
    "Recommendation",
    "RecommendationDocument",
    "TrialView",
    "build_document",
    "ceiling_numbers",
    "ceiling_sentence",
    "confirm",
    "diagnose",
    "exports",
    "load_recommendation",
    "pick_candidates",
    "recommendation_json_schema",
    "speedup_sentence",
    "validate_recommendation",
]
