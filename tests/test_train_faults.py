"""Kill/resume of training (`dflash-train`), with real SIGKILLs of a child process at random points.

A run is SIGKILLed several times at seeded-random moments (inside a step, or while a checkpoint is being written),
relaunched with the same config each time, and finally allowed to finish. It must end with the same loss at every
step and bit-identical weights as a run that was never interrupted, and leave no temporary or superseded checkpoint
directory.

Nothing here assumes a speed: every wait polls a condition under a generous deadline (`DEADLINE`) and a failure shows
the child's log; a kill that comes late (a busy machine) still lands before the run can finish (see `HOLD_AT` in
`CHILD`).
"""
import json, os, random, signal, subprocess, sys, textwrap, time
from dataclasses import asdict
from pathlib import Path
import pytest, torch, yaml
from dflash_nb.cache import CacheLayout
from dflash_nb.extract import extract_to_cache
from dflash_nb.model import DFlashDraftModel
from dflash_nb.target import tiny_target
from dflash_nb.config import TrainConfig
from dflash_nb.train import read_metrics
from dflash_nb.checkpoint import latest_checkpoint, weight_digest
from dflash_nb.testing import tiny_drafter

STEPS, SAVE_EVERY = 16, 2   # a step takes ~6 ms and a checkpoint ~5 ms here; starting the process ~3 s
ENV = os.environ | {"OMP_NUM_THREADS": "1", "PYTHONUNBUFFERED": "1"}
DEADLINE = 600              # s for one child to start and finish: ~5 s on an idle 2-core box, far more on a busy one


@pytest.fixture(scope="module")
def fixture_dir(tmp_path_factory):
    "A tiny hybrid target saved as a model directory and a float32 cache of 8 short samples with 5 taps."
    d = tmp_path_factory.mktemp("fx")
    tt = tiny_target("qwen3_5", num_layers=8, hidden_size=32, vocab_size=96, seed=0)
    tt.model.save_pretrained(d / "target")
    g = torch.Generator().manual_seed(0)
    samples = [{"input_ids": torch.randint(0, 95, (n,), generator=g), "loss_mask": (torch.arange(n) >= 3).long()}
               for n in (12, 20, 9, 16, 25, 14, 18, 11)]
    extract_to_cache(tt, samples, d / "cache", CacheLayout([1, 2, 3, 4, 5], dtype=torch.float32, samples_per_shard=4))
    return d


def run_config(fx: Path, out_dir: Path) -> Path:
    "Write the run's YAML (all TrainConfig fields, as `write_run_config` does) and return its path."
    cfg = TrainConfig(target=str(fx / "target"), cache=str(fx / "cache"), out_dir=str(out_dir),
                      drafter=tiny_drafter(),
                      num_anchors=8, batch_size=2, lr=3e-3, warmup=0.1, steps=STEPS, log_every=1, save_every=SAVE_EVERY,
                      device="cpu", progress=False)
    path = out_dir.parent / f"{out_dir.name}.yaml"
    path.write_text(yaml.safe_dump(asdict(cfg.validate()), sort_keys=False))
    return path


def start(config: Path, code: str | None = None, env: dict | None = None) -> subprocess.Popen:
    "`python -m dflash_nb.launch --config ...` (or `code` run with the same argv), logging to a file beside the config."
    cmd = [sys.executable, "-m", "dflash_nb.launch"] if code is None else [sys.executable, "-c", code]
    with open(config.with_suffix(".log"), "a") as log:
        return subprocess.Popen(cmd + ["--config", str(config)], stdout=log, stderr=subprocess.STDOUT,
                                env=ENV | (env or {}))


def log_tail(config: Path, n: int = 3000) -> str:
    "The end of the log that `start` writes beside `config` (all its children's output)."
    f = config.with_suffix(".log")
    return f.read_text()[-n:] if f.exists() else "(no log yet)"


def finish(p: subprocess.Popen, config: Path, timeout: float = DEADLINE) -> int:
    "The exit code of child `p`; a child still running after `timeout` s is killed and the test fails showing its log."
    try: return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill()
        p.wait()
        pytest.fail(f"the child was still running after {timeout} s; the end of its log:\n{log_tail(config)}")


def logged_steps(out_dir: Path) -> list[int]:
    "Steps of the metrics.jsonl lines in file order (a resumed run logs some steps again)."
    f = out_dir / "metrics.jsonl"
    if not f.exists(): return []
    return [json.loads(line)["step"] for line in f.read_text().splitlines() if line.endswith("}")]


def final_digest(out_dir: Path) -> str:
    ck = latest_checkpoint(out_dir)
    saved = json.loads((ck / "training_state.json").read_text())["rank_weight_digests"]
    assert saved == [weight_digest(DFlashDraftModel.from_pretrained(ck))]
    return saved[0]


@pytest.fixture(scope="module")
def reference(fixture_dir):
    "The uninterrupted run's directory."
    out = fixture_dir / "whole"
    config = run_config(fixture_dir, out)
    assert finish(start(config), config) == 0, log_tail(config)
    assert latest_checkpoint(out).name == f"step-{STEPS:07d}"
    return out


# A child that is `dflash-train` with `os.replace` wrapped, so it can SIGKILL itself at a chosen point of the
# checkpoint protocol: `dflash_nb.checkpoint.save_checkpoint` renames `.step-N.tmp` to `step-N`, then replaces
# `latest.json` (via `latest.json.tmp`). With HOLD_AT=n it stops itself (SIGSTOP) before installing a checkpoint of
# step >= n: `kill_at` aims its SIGKILL within ~25 ms of step n - 3, so the hold only matters when the parent is late
# (a busy machine), and the kill then lands there, inside a checkpoint write, instead of after a run that has finished.
CHILD = textwrap.dedent("""
    import os, signal, sys
    where, step = os.environ.get("KILL_WHERE", ""), int(os.environ.get("KILL_STEP", "0"))
    hold = int(os.environ.get("HOLD_AT", "0"))
    real = os.replace
    def replace(src, dst):
        src, dst = str(src), str(dst)
        installs = os.path.basename(dst).startswith("step-") and src.endswith(".tmp")
        if hold and installs and int(os.path.basename(dst)[5:]) >= hold: os.kill(os.getpid(), signal.SIGSTOP)
        this = dst.endswith(f"step-{step:07d}") and src.endswith(".tmp")
        if where == "before_rename" and this: os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst)
        if where == "before_latest" and this: os.kill(os.getpid(), signal.SIGKILL)
    os.replace = replace
    from dflash_nb.launch import train_main
    train_main(sys.argv[1:])
""")


def kill_at(config: Path, out_dir: Path, step: int, delay: float, timeout: float = DEADLINE):
    "Start the run of `config` and SIGKILL it `delay` s after it logs `step` (a line appended after its start)."
    seen, t0 = len(logged_steps(out_dir)), time.monotonic()
    p = start(config, CHILD, dict(HOLD_AT=str(step + 3)))   # it cannot finish before the kill, however late that comes
    while not any(s >= step for s in logged_steps(out_dir)[seen:]):
        assert p.poll() is None, f"the run exited ({p.returncode}) before step {step}:\n{log_tail(config)}"
        assert time.monotonic() - t0 < timeout, f"the run did not log step {step} in {timeout} s:\n{log_tail(config)}"
        time.sleep(0.005)
    time.sleep(delay)
    assert p.poll() is None, f"the run exited ({p.returncode}) before it was killed:\n{log_tail(config)}"
    os.kill(p.pid, signal.SIGKILL)
    assert finish(p, config) == -signal.SIGKILL, log_tail(config)


def assert_same_run(out: Path, ref: Path):
    assert [r["step"] for r in read_metrics(out)] == list(range(1, STEPS + 1))
    assert [r["loss"] for r in read_metrics(out)] == [r["loss"] for r in read_metrics(ref)]
    assert latest_checkpoint(out).name == f"step-{STEPS:07d}"
    assert final_digest(out) == final_digest(ref)
    leftovers = [p.name for p in (out / "checkpoints").iterdir() if p.name.startswith(".")]
    assert not leftovers, leftovers


@pytest.mark.parametrize("n_kills", [2, pytest.param(4, marks=pytest.mark.slow)])
def test_sigkill_training_at_random_points_then_resume(fixture_dir, reference, n_kills):
    out, rng, kills = fixture_dir / f"killed-{n_kills}", random.Random(8), []
    config = run_config(fixture_dir, out)
    while len(kills) < n_kills:
        ck = latest_checkpoint(out)
        done = int(ck.name.split("-")[1]) if ck else 0
        if done + 1 > STEPS - 3: break
        # within ~2 steps and saves:
        step, delay = rng.randint(done + 1, min(done + 3, STEPS - 3)), rng.uniform(0.0, 0.02)
        kill_at(config, out, step, delay)
        kills.append((step, round(delay, 3), latest_checkpoint(out).name if latest_checkpoint(out) else None))
    print("kills (step logged, delay s, latest checkpoint after the kill):", kills)
    assert len(kills) >= min(n_kills, 3), kills   # each kill leaves at most step + 2 done (HOLD_AT): 4 fit in 16 steps
    assert finish(start(config), config) == 0, log_tail(config)
    assert_same_run(out, reference)


@pytest.mark.parametrize("where", ["before_rename", pytest.param("before_latest", marks=pytest.mark.slow)])
def test_sigkill_inside_checkpoint_write_then_resume(fixture_dir, reference, where):
    "Killed while step 4 is being installed: the previous checkpoint stays the latest; the resumed run is identical."
    out = fixture_dir / f"ckpt-{where}"
    config = run_config(fixture_dir, out)
    kill = dict(KILL_WHERE=where, KILL_STEP="4")
    assert finish(start(config, CHILD, kill), config) == -signal.SIGKILL, log_tail(config)
    assert latest_checkpoint(out).name == "step-0000002"
    assert (out / "checkpoints" / ("step-0000004" if where == "before_latest" else ".step-0000004.tmp")).is_dir()
    # killed twice at the same point: two leftovers of step 4
    assert finish(start(config, CHILD, kill), config) == -signal.SIGKILL, log_tail(config)
    assert finish(start(config), config) == 0, log_tail(config)
    assert_same_run(out, reference)
