"""Build ``validation/vllm_lifecycle.csv`` from the public vLLM lifecycle-metric runs of inference-sim/training.

Run by hand, never at test time: it reads a local bare clone of https://github.com/inference-sim/training (the
``default_args/<run>/`` folders at one commit) and writes one row per run and load stage:

    python validation/convert_vllm_lifecycle.py /path/to/training.git [commit]

What each run holds (``replay_data/ground_truth_schema.md`` of that repository):

* ``exp-config.yaml``: the vLLM server's flags (model, tensor parallelism, ``max_num_seqs``,
  ``max_num_batched_tokens``, ``max_model_len``); vLLM V1, so chunked prefill and prefix caching are on (their
  defaults). The GPU is the H100 80GB HBM3 SXM (the repository's DESIGN.md, "Dataset"). ``vllm_logging.json`` is
  vLLM's Python logging configuration (where its log went), not its flags.
* ``results/config.yaml``: the load generator's resolved config (kubernetes-sigs/inference-perf): a
  ``shared_prefix`` data set of ``num_groups x num_prompts_per_group`` prompts (a random system prompt of
  ``system_prompt_len`` tokens per group, a random question of ``question_len`` tokens per prompt), shuffled once
  and sent in turn, over and over; every request asks for ``output_len`` tokens with ``ignore_eos``; a
  ``constant`` load per stage: ``int(rate x duration)`` requests whose gaps are exponential draws scaled to sum
  to the stage's duration (inference-perf ``ConstantLoadTimer``). ``profile.yaml`` names fields
  (``num_unique_system_prompts``, ``enable_multi_turn_chat``) that version did not know; the resolved config is
  what ran.
* ``results/stage_<N>_lifecycle_metrics.json``: each stage's request latency (E2E), time to first token and
  time per output token, as mean and percentiles over the successful requests, with the measured prompt
  lengths.

The client counts streamed chunks, not tokens: vLLM's stream carries about two chunks per generated token, so the
JSON's ``time_per_output_token`` and ``inter_token_latency`` are per chunk. Every request generates exactly
``output_len`` tokens (``ignore_eos``; far below ``max_model_len``), so the per-token TPOT of a request is
``(e2e - ttft) / (output_len - 1)``; its mean is exact from the two means, and its p90 / p99 are the chunk
TPOT's scaled by the same chunks-per-token ratio (every request streams the same number of chunks).

Runs where more than :data:`MAX_FAILURE_FRAC` of the requests failed (timeouts under overload) are left out:
their latencies describe only the requests that survived.
"""

from __future__ import annotations

import csv
import io
import json
import subprocess
import sys
from pathlib import Path

import yaml

REPO_URL = "https://github.com/inference-sim/training"
OUT = Path(__file__).resolve().parent / "vllm_lifecycle.csv"
MAX_FAILURE_FRAC = 0.01
#: Hugging Face id -> catalog slug
MODELS = {
    "meta-llama/Llama-2-7b-hf": "llama-2-7b",
    "meta-llama/Llama-2-70b-hf": "llama-2-70b",
    "mistralai/Mixtral-8x7B-v0.1": "mixtral-8x7b",
    "codellama/CodeLlama-34b-Instruct-hf": "codellama-34b",
}
COLUMNS = (
    "family id run stage model hf_model gpu gpus tp weights kv_dtype engine max_num_seqs max_num_batched_tokens "
    "max_model_len chunked_prefill prefix_caching arrival rate_per_s duration_s requests input output "
    "system_prompt_len prompt_groups prompts_per_group successes failures e2e_mean_s e2e_p90_s e2e_p99_s "
    "ttft_mean_s ttft_p90_s ttft_p99_s itl_mean_s itl_p90_s itl_p99_s chunks_per_token source commit path date "
    "settings"
).split()
HEADER = (
    "# Public vLLM runs with their per-stage request lifecycle (inference-sim/training default_args/*), one row per "
    "run and load stage; built by validation/convert_vllm_lifecycle.py (see validation/README.md). Latencies in "
    "seconds over the stage's successful requests: e2e (request latency), ttft (time to first token), itl (a "
    "request's time per output token, per generated token: (e2e - ttft) / (output - 1) for the mean, the client's "
    "per-chunk TPOT percentiles times chunks_per_token for p90 / p99). input: the measured mean prompt tokens; "
    "output: the max_tokens every request generated (ignore_eos). arrival poisson: inference-perf's constant load "
    "(exponential gaps scaled to the stage's duration)."
)


def _show(git_dir: Path, commit: str, path: str) -> str:
    return subprocess.run(
        ["git", "--git-dir", str(git_dir), "show", f"{commit}:{path}"], check=True, capture_output=True, text=True
    ).stdout


def _runs(git_dir: Path, commit: str) -> list[str]:
    out = subprocess.run(
        ["git", "--git-dir", str(git_dir), "ls-tree", "--name-only", f"{commit}:default_args"],
        check=True,
        capture_output=True,
        text=True,
    ).stdout
    return sorted(x for x in out.split() if x)


def _g(x: float) -> str:
    return f"{x:.6g}"


def rows(git_dir: Path, commit: str) -> tuple[list[dict[str, str]], list[str]]:
    """The family's rows and the runs left out (with why)."""
    out: list[dict[str, str]] = []
    left: list[str] = []
    for run in _runs(git_dir, commit):
        base = f"default_args/{run}"
        exp = yaml.safe_load(_show(git_dir, commit, f"{base}/exp-config.yaml"))
        cfg = yaml.safe_load(_show(git_dir, commit, f"{base}/results/config.yaml"))
        summary = json.loads(_show(git_dir, commit, f"{base}/results/summary_lifecycle_metrics.json"))
        sent = summary["load_summary"]["count"]
        failed = summary["failures"]["count"]
        if failed > MAX_FAILURE_FRAC * sent:
            left.append(f"{run}: {failed} of {sent} requests failed ({failed / sent:.0%})")
            continue
        sp = cfg["data"]["shared_prefix"]
        out_len = int(sp["output_len"])
        tp = int(exp["tensor_parallelism"])
        for i, stage in enumerate(cfg["load"]["stages"]):
            path = f"{base}/results/stage_{i}_lifecycle_metrics.json"
            m = json.loads(_show(git_dir, commit, path))
            lat, ok = m["successes"]["latency"], m["successes"]
            e2e, ttft, tpot = lat["request_latency"], lat["time_to_first_token"], lat["time_per_output_token"]
            itl_mean = (e2e["mean"] - ttft["mean"]) / (out_len - 1)
            chunks = itl_mean / tpot["mean"]
            short = run.split("-", 2)[2]  # drop the timestamp
            out.append(
                {
                    "family": "vllm-lifecycle",
                    "id": f"life-{short}-s{i}",
                    "run": run,
                    "stage": str(i),
                    "model": MODELS[exp["model"]],
                    "hf_model": exp["model"],
                    "gpu": "h100-sxm",
                    "gpus": str(tp),
                    "tp": str(tp),
                    "weights": "bf16",
                    "kv_dtype": "bf16",
                    "engine": "vllm",
                    "max_num_seqs": str(exp["max_num_seqs"]),
                    "max_num_batched_tokens": str(exp["max_num_batched_tokens"]),
                    "max_model_len": str(exp["max_model_len"]),
                    "chunked_prefill": "1",
                    "prefix_caching": "1",
                    "arrival": "poisson",
                    "rate_per_s": _g(float(stage["rate"])),
                    "duration_s": _g(float(stage["duration"])),
                    "requests": str(m["load_summary"]["count"]),
                    "input": str(round(ok["prompt_len"]["mean"])),
                    "output": str(out_len),
                    "system_prompt_len": str(sp["system_prompt_len"]),
                    "prompt_groups": str(sp["num_groups"]),
                    "prompts_per_group": str(sp["num_prompts_per_group"]),
                    "successes": str(ok["count"]),
                    "failures": str(m["failures"]["count"]),
                    "e2e_mean_s": _g(e2e["mean"]),
                    "e2e_p90_s": _g(e2e["p90"]),
                    "e2e_p99_s": _g(e2e["p99"]),
                    "ttft_mean_s": _g(ttft["mean"]),
                    "ttft_p90_s": _g(ttft["p90"]),
                    "ttft_p99_s": _g(ttft["p99"]),
                    "itl_mean_s": _g(itl_mean),
                    "itl_p90_s": _g(tpot["p90"] * chunks),
                    "itl_p99_s": _g(tpot["p99"] * chunks),
                    "chunks_per_token": f"{chunks:.4f}",
                    "source": f"{REPO_URL}/tree/{commit}/{base}",
                    "commit": commit,
                    "path": path,
                    "date": f"{run[:4]}-{run[4:6]}-{run[6:8]}",
                    "settings": (
                        f"vLLM V1 (inference-sim/vllm fork with journey tracing), {exp['model']} TP{tp} on H100 SXM, "
                        f"max_num_seqs {exp['max_num_seqs']}, max_num_batched_tokens "
                        f"{exp['max_num_batched_tokens']}, max_model_len {exp['max_model_len']}; inference-perf "
                        f"shared_prefix {sp['num_groups']} x {sp['num_prompts_per_group']} prompts of "
                        f"{sp['system_prompt_len']} + {sp['question_len']} tokens cycled, {out_len} output tokens "
                        f"(ignore_eos), constant load {stage['rate']}/s for {stage['duration']} s"
                    ),
                }
            )
    return out, left


def main(argv: list[str]) -> int:
    if len(argv) < 2:
        print("usage: convert_vllm_lifecycle.py GIT_DIR [COMMIT]", file=sys.stderr)
        return 2
    git_dir = Path(argv[1])
    commit = argv[2] if len(argv) > 2 else "HEAD"
    commit = subprocess.run(
        ["git", "--git-dir", str(git_dir), "rev-parse", commit], check=True, capture_output=True, text=True
    ).stdout.strip()
    got, left = rows(git_dir, commit)
    buf = io.StringIO()
    w = csv.DictWriter(buf, fieldnames=COLUMNS, lineterminator="\n")
    w.writeheader()
    w.writerows(got)
    OUT.write_text(HEADER + "\n" + buf.getvalue())
    print(f"{len(got)} rows -> {OUT}")
    for why in left:
        print(f"left out: {why}")
    return 0


if __name__ == "__main__":
    raise SystemExit(main(sys.argv))
