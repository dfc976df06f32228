"""The test suite: tests/README.md says where a test lives.

A test module moved by issue 39's reorganisation still imports by its old name (a suite written before
it: ``from tests.test_events import Hook``): a module of the same objects as the one under the new name."""

from __future__ import annotations

import importlib
import importlib.abc
import importlib.machinery
import sys
import types

MOVED = {
    "tests.faults.test_full_disk": "tests.faults.test_disk_full",
    "tests.faults.test_killed_client": "tests.faults.test_interrupted_client",
    "tests.faults.test_link_faults": "tests.faults.test_link",
    "tests.faults.test_pull_streams": "tests.security.test_hostile_pull",
    "tests.test_accept_scripts": "tests.e2e.test_accept_scripts",
    "tests.test_agent": "tests.remote.run.test_agent",
    "tests.test_agent_cpu_host": "tests.remote.host.test_agent_gpus",
    "tests.test_agent_gpus": "tests.remote.host.test_agent_gpus",
    "tests.test_agent_lost": "tests.remote.jobs.test_agent_lost",
    "tests.test_agent_py38": "tests.remote.test_agent_py38",
    "tests.test_agent_units": "tests.remote.view.test_agent_units",
    "tests.test_api": "tests.gpujob.api.test_api",
    "tests.test_autostop": "tests.remote.run.test_autostop",
    "tests.test_bad_input": "tests.gpujob.cli.test_bad_input",
    "tests.test_byo_checkpoints": "tests.remote.ckpt.test_byo_checkpoints",
    "tests.test_byo_e2e": "tests.e2e.test_byo_e2e",
    "tests.test_byo_hook": "tests.templates.test_byo_hook",
    "tests.test_checkpoints": "tests.remote.ckpt.test_checkpoints",
    "tests.test_cleanup": "tests.gpujob.usecases.test_cleanup",
    "tests.test_cli_startup": "tests.gpujob.cli.test_cli_startup",
    "tests.test_completion": "tests.gpujob.cli.test_completion",
    "tests.test_config_injection": "tests.gpujob.config.test_config_injection",
    "tests.test_dashboard": "tests.gpujob.dashboard.test_dashboard",
    "tests.test_dashboard_charts": "tests.gpujob.dashboard.test_dashboard_charts",
    "tests.test_dashboard_runs": "tests.gpujob.dashboard.test_dashboard_runs",
    "tests.test_data_store": "tests.remote.data.test_data_store",
    "tests.test_datacheck": "tests.gpujob.usecases.test_datacheck",
    "tests.test_doctor": "tests.remote.host.test_doctor",
    "tests.test_events": "tests.remote.run.test_events",
    "tests.test_exit_codes": "tests.gpujob.cli.test_exit_codes",
    "tests.test_experiments": "tests.gpujob.usecases.experiments.test_experiments",
    "tests.test_faults_disk": "tests.faults.test_disk_full",
    "tests.test_faults_gc": "tests.faults.test_gc_race",
    "tests.test_faults_killed": "tests.faults.test_concurrency",
    "tests.test_faults_link": "tests.faults.test_link",
    "tests.test_faults_move": "tests.faults.test_concurrency",
    "tests.test_faults_race": "tests.faults.test_concurrency",
    "tests.test_faults_state": "tests.faults.test_damaged_state",
    "tests.test_first_path": "tests.e2e.test_first_path",
    "tests.test_first_project": "tests.e2e.test_first_project",
    "tests.test_follow_gone": "tests.gpujob.usecases.test_follow_gone",
    "tests.test_forgotten_jobs": "tests.gpujob.config.test_forgotten_jobs",
    "tests.test_fuzz_input": "tests.gpujob.cli.test_fuzz_input",
    "tests.test_gpu_check": "tests.benchmarks.test_gpu_check",
    "tests.test_gpu_health": "tests.remote.host.test_gpu_health",
    "tests.test_helper_commands": "tests.gpujob.test_helper_commands",
    "tests.test_host_keys": "tests.gpujob.config.test_host_keys",
    "tests.test_host_rekey": "tests.gpujob.usecases.test_host_rekey",
    "tests.test_host_ssh_config": "tests.gpujob.config.test_host_ssh_config",
    "tests.test_host_store_copy": "tests.gpujob.config.test_host_store_copy",
    "tests.test_hostile_address": "tests.security.test_hostile_address",
    "tests.test_hostile_agent": "tests.security.test_hostile_agent",
    "tests.test_hostile_dashboard": "tests.security.test_hostile_dashboard",
    "tests.test_hostile_manifest": "tests.security.test_hostile_manifest",
    "tests.test_hostile_pull": "tests.security.test_hostile_pull",
    "tests.test_hostile_ranges": "tests.security.test_hostile_ranges",
    "tests.test_hostile_stderr": "tests.security.test_hostile_stderr",
    "tests.test_hostile_text": "tests.security.test_hostile_text",
    "tests.test_ignore_git": "tests.gpujob.config.test_ignore_git",
    "tests.test_interrupt_says": "tests.faults.test_interrupted_client",
    "tests.test_job_index": "tests.remote.jobs.test_job_index",
    "tests.test_job_numbers": "tests.gpujob.config.test_job_numbers",
    "tests.test_job_refs": "tests.gpujob.usecases.test_job_refs",
    "tests.test_job_spec": "tests.gpujob.test_job_spec",
    "tests.test_keepcopy": "tests.remote.ckpt.test_keepcopy",
    "tests.test_keepcopy_disk": "tests.remote.ckpt.test_keepcopy_disk",
    "tests.test_lab_mlflow": "tests.gpujob.usecases.lab.test_lab_mlflow",
    "tests.test_lab_sweep": "tests.gpujob.usecases.lab.test_lab_sweep",
    "tests.test_launcher": "tests.remote.run.test_launcher",
    "tests.test_layers": "tests.gpujob.test_layers",
    "tests.test_ls_layout": "tests.gpujob.ui.test_ls_layout",
    "tests.test_metrics_sources": "tests.remote.metrics.test_metrics_sources",
    "tests.test_mirror": "tests.remote.mirror.test_mirror",
    "tests.test_mirror_versions": "tests.remote.mirror.test_mirror_versions",
    "tests.test_move": "tests.gpujob.usecases.test_move",
    "tests.test_mux": "tests.gpujob.transport.test_mux",
    "tests.test_never_synced": "tests.gpujob.usecases.secrecy.test_never_synced",
    "tests.test_nonfinite": "tests.gpujob.ui.test_nonfinite",
    "tests.test_notify": "tests.remote.notify.test_notify",
    "tests.test_notify_trickle": "tests.remote.notify.test_notify_trickle",
    "tests.test_plot_status": "tests.gpujob.ui.test_plot_status",
    "tests.test_power": "tests.gpujob.usecases.power.test_power",
    "tests.test_power_guards": "tests.gpujob.usecases.power.test_power_guards",
    "tests.test_preflight": "tests.remote.host.test_preflight",
    "tests.test_protocol": "tests.remote.core.test_protocol",
    "tests.test_provision": "tests.remote.env.test_provision",
    "tests.test_pull": "tests.gpujob.usecases.test_pull",
    "tests.test_pull_refused_name": "tests.gpujob.usecases.test_pull_refused_name",
    "tests.test_pull_truth": "tests.gpujob.usecases.test_pull_truth",
    "tests.test_range_serve": "tests.remote.stream.test_range_serve",
    "tests.test_refuse_early": "tests.gpujob.usecases.test_refuse_early",
    "tests.test_remote_layers": "tests.remote.test_remote_layers",
    "tests.test_runtime": "tests.templates.test_runtime",
    "tests.test_same_instance": "tests.gpujob.usecases.test_same_instance",
    "tests.test_scripts_ckpt_discovery": "tests.remote.ckpt.test_scripts_ckpt_discovery",
    "tests.test_scripts_ckpt_links": "tests.remote.ckpt.test_scripts_ckpt_links",
    "tests.test_scripts_logcorpus": "tests.remote.metrics.test_scripts_logcorpus",
    "tests.test_scripts_recipes": "tests.e2e.test_scripts_recipes",
    "tests.test_secrets_scan": "tests.security.test_secrets_scan",
    "tests.test_shell_access": "tests.gpujob.usecases.test_shell_access",
    "tests.test_stop_certain": "tests.remote.stopping.test_stop_certain",
    "tests.test_stored_host_data": "tests.gpujob.config.test_stored_host_data",
    "tests.test_sync": "tests.gpujob.usecases.test_sync",
    "tests.test_sync_changes": "tests.gpujob.usecases.test_sync_changes",
    "tests.test_sync_ranges": "tests.gpujob.usecases.test_sync_ranges",
    "tests.test_sync_record": "tests.gpujob.usecases.test_sync_record",
    "tests.test_sync_scale": "tests.gpujob.usecases.test_sync_scale",
    "tests.test_tail": "tests.gpujob.usecases.test_tail",
    "tests.test_templates_causal_lm": "tests.templates.test_templates_causal_lm",
    "tests.test_templates_init": "tests.templates.test_templates_init",
    "tests.test_templates_seqcls": "tests.templates.test_templates_seqcls",
    "tests.test_terminal_injection": "tests.security.test_terminal_injection",
    "tests.test_terminal_screens": "tests.gpujob.ui.test_terminal_screens",
    "tests.test_transports": "tests.gpujob.transport.test_transports",
    "tests.test_truth_small": "tests.e2e.test_truth_small",
    "tests.test_tunnel": "tests.gpujob.usecases.test_tunnel",
    "tests.test_user_outputs_metrics": "tests.remote.metrics.test_user_outputs_metrics",
    "tests.test_user_outputs_notify": "tests.remote.notify.test_user_outputs_notify",
    "tests.test_user_outputs_pull": "tests.gpujob.usecases.test_user_outputs_pull",
    "tests.test_user_scripts_checkpoints": "tests.remote.ckpt.test_user_scripts_checkpoints",
    "tests.test_user_scripts_hf": "tests.remote.ckpt.test_user_scripts_hf",
    "tests.test_user_scripts_lightning": "tests.remote.ckpt.test_user_scripts_lightning",
    "tests.test_user_scripts_move": "tests.gpujob.usecases.test_user_scripts_move",
    "tests.test_user_scripts_status": "tests.remote.metrics.test_user_scripts_status",
    "tests.test_user_scripts_torchrun": "tests.remote.run.test_user_scripts_torchrun",
    "tests.test_watchers": "tests.remote.run.test_watchers",
    "tests.test_xdg_paths": "tests.gpujob.config.test_xdg_paths",
}


class _OldName(importlib.abc.MetaPathFinder, importlib.abc.Loader):
    """``tests.test_x`` -> the names of ``tests.<package>.test_x``, asked for after every other finder."""

    def find_spec(self, name: str, path: object = None, target: object = None) -> importlib.machinery.ModuleSpec | None:
        return importlib.machinery.ModuleSpec(name, self) if name in MOVED else None

    def create_module(self, spec: importlib.machinery.ModuleSpec) -> None:
        return None

    def exec_module(self, module: types.ModuleType) -> None:
        new = importlib.import_module(MOVED[module.__name__])
        module.__dict__.update({k: v for k, v in vars(new).items() if not k.startswith("__")})


sys.meta_path.append(_OldName())
