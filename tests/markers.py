"""Markers given at collection (tests/conftest.py calls `markers_for` on every test).

A test that uses a service's fixture, directly or through another fixture, carries the service's
marker; the tests in SLOW carry `slow`. `make test-fast` deselects both, so no test has to say so
itself, and a test that starts using Docker is left out of the inner loop the moment it asks for
`docker_client`. `make test` runs everything."""

from __future__ import annotations

from collections.abc import Iterable

SERVICE_FIXTURES = {"docker_client": "docker", "postgres_url": "postgres", "ray_cluster": "ray"}

# Tests that take ~2.5 s or more alone on a 2-core machine (the sum of `--durations`), by node id: a file, or
# file::test for all of that test's parameters. Each says where its time goes.
SLOW: dict[str, str] = {
    "tests/demo_policy/test_teach_data.py::test_a_polish_pass_continues_from_the_first_pass_and_refuses_another_recipes_build": "teaches a policy twice",
    "tests/demo_policy/test_teach_data.py::test_polish_seed_draws_the_polish_afresh_and_orders_its_batches": "teaches a policy three times",
    "tests/demo_policy/test_teach_data.py::test_a_tiny_recipe_teaches_a_loadable_policy_and_is_cached": "teaches a policy",
    "tests/demo_policy/test_teach_data.py::test_the_card_names_the_hash_its_directory_was_built_under": "teaches a policy",
    "tests/gapforge/test_cli_dev_teach.py::test_dev_teach_prints_its_steps_and_not_the_dataset_bars": "teaches a policy",
    "tests/demo_policy/test_artifact.py::test_the_shipped_policy_replays_its_card_on_a_task_subset": "plays the shipped policy",
    "tests/envs/test_tau2_parity.py": "every case plays through tau2's own orchestrator as well",
    "tests/envs/test_tau2_data_dir.py::test_a_task_set_directory_is_what_the_runs_use_and_record": "collects and evaluates in CLI processes",
    "tests/graph/test_kill_resume.py::test_kill_at_each_stage_then_resume_matches_an_uninterrupted_run": "a graph run killed at each stage",
    "tests/gapforge/test_cli_router.py::test_serve_answers_the_openai_client": "starts `gapforge serve`",
    "tests/gapforge/test_cli_router.py::test_evaluate_then_report_from_the_cli": "teaches a router, evaluates every policy",
    "tests/envs/test_mcp_failures.py::test_a_silent_server_hits_the_call_deadline": "MCP server processes",
    "tests/envs/test_mcp_failures.py::test_a_server_that_never_answers_the_handshake_times_out": "MCP server processes",
    "tests/gapforge/test_cli_lease.py::test_a_collector_paused_past_the_ttl_stops_and_the_counts_add_up": "two collector processes",
    "tests/gapforge/test_packaging.py::test_the_wheel_holds_one_top_level_package": "builds a wheel with pip",
    "tests/gapforge/test_cli_lease.py::test_a_second_process_on_a_run_is_refused_with_the_holder_named": "CLI processes",
    "tests/executor/test_processes.py::test_a_worker_killed_mid_collection_costs_its_episodes_only_and_the_rerun_ends_exact": "worker processes",
    "tests/executor/test_processes.py::test_workers_that_keep_dying_stop_the_stage_with_worker_lost": "worker processes that die",
    "tests/executor/test_processes.py::test_what_cannot_travel_fails_its_episode_with_a_message_and_nothing_hangs": "worker processes",
    "tests/executor/test_processes.py::test_an_episode_error_and_a_policy_that_cannot_load_come_back_with_their_type": "worker processes",
    "tests/executor/test_processes.py::test_a_factory_that_cannot_travel_plays_on_the_loop": "worker processes",
    "tests/agents/test_rollouts.py::test_kill_halfway_then_resume_yields_exact_count": "a collector process killed",
    "tests/agents/test_rollout_faults.py::test_a_run_refuses_foreign_work_and_a_second_collector": "collector processes",
    "tests/store/test_store_fencing.py::test_a_takeover_names_a_holder_stuck_inside_a_write_instead_of_waiting_for_it": "lease holder processes",
    "tests/serving/test_vllm_standin.py::test_chat_lora_loading_and_scoring_through_gapforges_vllm_clients": "starts the vLLM stand-in",
    "tests/serving/test_vllm_standin.py::test_runtime_lora_loading_needs_vllms_env_flag": "starts the vLLM stand-in",
    "tests/serving/test_tiny_model.py::test_builds_and_loads_with_the_hub_unreachable": "builds a model in a process",
    "tests/ui/test_browser.py": "drives Chromium",
    "tests/ui/test_installed_ui.py::test_the_installed_command_serves_a_run_from_any_directory": "builds a wheel, installs it in a venv, starts `gapforge ui`",
    "tests/executor/test_worker_timeouts.py::test_a_frozen_worker_times_out_its_episode_and_is_replaced": "worker processes, a timeout",
    "tests/executor/test_executor_config.py::test_an_unreachable_head_stops_the_command_with_one_line_and_exit_2": "tries to reach a Ray head",
    "tests/serving/test_overload_sigterm.py::test_sigterm_lets_the_request_in_flight_finish_and_exits_0": "a server process",
    "tests/gapforge/test_cli_user_env_faults.py::test_a_step_that_never_returns_times_out_the_rest_finish_and_a_resume_redoes_only_it": "CLI processes, a timeout",  # noqa: E501 (a test id)
    "tests/gapforge/test_cli_user_env_faults.py::test_an_env_that_fails_past_the_share_stops_with_exit_4_naming_it": "CLI processes",
    "tests/gapforge/test_cli_user_env_faults.py::test_env_errors_below_the_share_warn_and_a_resume_after_the_fix_plays_them_again": "CLI processes",
}


def _listed(nodeid: str, key: str) -> bool:
    return nodeid == key or nodeid.startswith((key + "[", key + "::"))


def markers_for(nodeid: str, fixturenames: Iterable[str]) -> set[str]:
    """The markers a test with this node id and these fixtures (the whole closure) is given."""
    marks = {SERVICE_FIXTURES[name] for name in set(fixturenames) & SERVICE_FIXTURES.keys()}
    if any(_listed(nodeid, key) for key in SLOW):
        marks.add("slow")
    return marks
