"""routing.backend=openings: the router built from each capability's synthetic-env openings."""

from __future__ import annotations

import pytest

from gapforge.agents.router import RouterError, RoutingConfig
from gapforge.envs.shop import ShopEnv
from gapforge.evaluation.routing import env_openings
from gapforge.evaluation.service import RunArtifacts, build_router


def test_build_router_with_openings_routes_by_the_envs_first_messages() -> None:
    shop = ShopEnv()
    refusals = [t for t in shop.task_ids() if shop.task_family(t) == "policy_refusal"]
    openings = {
        "precondition_verification": env_openings(ShopEnv, refusals[:6])
    }  # any Environment: the target stands in here
    assert len(openings["precondition_verification"]) == 6 and all(openings["precondition_verification"])
    artifacts = RunArtifacts(
        "r", [{"name": "precondition_verification", "definition": "d", "example": "", "adapter": "pre"}], {}
    )
    router = build_router(artifacts, routing=RoutingConfig(backend="openings"), openings=openings)
    first = lambda t: shop.reset(t)[1].content  # noqa: E731
    assert router.route(first(refusals[0])).adapter == "pre"
    lookups = [t for t in shop.task_ids() if shop.task_family(t) == "lookup_and_answer"]
    assert all(router.route(first(t)).adapter is None for t in lookups)
    with pytest.raises(RouterError, match="needs each capability's synthetic-env openings"):
        build_router(artifacts, routing=RoutingConfig(backend="openings"), openings={})
