"""Kill/resume mechanics of the hidden-state cache (dflash_nb.extract), with real SIGKILLs of a child process.

Each scenario kills an extraction at a chosen point of its write protocol (or at a random moment), then resumes it
in this process and requires the result to be byte-identical to an uninterrupted extraction. Extraction batches
samples within a shard and a resume re-makes whole shards, so "byte-identical" compares the same batches (shapes) on the
same path, with one thread in the child and here. No wait assumes a speed: each has a generous deadline (`DEADLINE`) and a failure shows the child's log.
"""
import os, select, shutil, signal, subprocess, sys, textwrap, time
from pathlib import Path
import pytest, torch
from dflash_nb.cache import HiddenStateCache, read_manifest, CacheLayout
from dflash_nb.extract import extract_to_cache
from dflash_nb.target import tiny_target

TAPS, SPS, BS, N = [1, 3, 5], 2, 2, 9
DEADLINE = 600   # s for a child to start (import torch) and extract: a few s on an idle box, far more on a busy one

CHILD = textwrap.dedent("""
    import os, signal, sys, time, torch
    torch.set_num_threads(1)
    sys.path.insert(0, {tests!r})
    from test_cache_faults import samples, TAPS, SPS, BS
    from dflash_nb.cache import CacheLayout
    from dflash_nb.extract import extract_to_cache
    from dflash_nb.target import tiny_target
    out, where, at, slow = sys.argv[1], sys.argv[2], int(sys.argv[3]), float(sys.argv[4])
    real, calls = os.replace, [0]
    def replace(src, dst):  # os.replace call 2k+1 installs shard k, call 2k+2 the manifest after it
        calls[0] += 1
        if where == "before_replace" and calls[0] == at: os.kill(os.getpid(), signal.SIGKILL)
        real(src, dst)
        if where == "after_replace" and calls[0] == at: os.kill(os.getpid(), signal.SIGKILL)
    os.replace = replace
    def slowly(items):
        for s in items: time.sleep(slow); yield s
    print("ready", flush=True)
    extract_to_cache(tiny_target("qwen3", seed=3), slowly(samples()), out, CacheLayout(TAPS, samples_per_shard=SPS),
                     batch_size=BS)
""")


def samples():
    g = torch.Generator().manual_seed(0)
    out = []
    for i in range(N):
        T = int(torch.randint(5, 30, (1,), generator=g))
        out.append({"input_ids": torch.randint(0, 256, (T,), generator=g), "loss_mask": (torch.arange(T) >= 3).long()})
    return out


def extract(out):
    torch.set_num_threads(1)
    return extract_to_cache(tiny_target("qwen3", seed=3), samples(), out, CacheLayout(TAPS, samples_per_shard=SPS),
                            batch_size=BS)


@pytest.fixture(scope="module")
def reference(tmp_path_factory):
    return extract(tmp_path_factory.mktemp("ref") / "cache")


def child(out, where="", at=0, slow=0.0):
    "An extraction into `out` in a child process (killing itself at `where`/`at`); its stderr goes to `out`.log."
    code = CHILD.format(tests=os.path.dirname(__file__))
    with open(f"{out}.log", "a") as log:
        return subprocess.Popen([sys.executable, "-c", code, str(out), where, str(at), str(slow)], stdout=subprocess.PIPE,
                                stderr=log, text=True)


def log_tail(out, n: int = 3000) -> str:
    f = Path(f"{out}.log")
    return f.read_text()[-n:] if f.exists() else "(no log)"


def finish(p: subprocess.Popen, out, timeout: float = DEADLINE) -> int:
    "The exit code of child `p`; one still running after `timeout` s is killed and the test fails showing its log."
    try: return p.wait(timeout=timeout)
    except subprocess.TimeoutExpired:
        p.kill(); p.wait()
        pytest.fail(f"the extraction child was still running after {timeout} s; its log:\n{log_tail(out)}")


def wait_ready(p: subprocess.Popen, out, timeout: float = DEADLINE):
    "Wait for the child's `ready` line (its imports done), failing with its log if it dies or takes over `timeout` s."
    if not select.select([p.stdout], [], [], timeout)[0]:
        p.kill(); p.wait()
        pytest.fail(f"the extraction child did not start in {timeout} s; its log:\n{log_tail(out)}")
    line = p.stdout.readline().strip()
    assert line == "ready", f"the child printed {line!r} and exited with {p.wait()}; its log:\n{log_tail(out)}"


def assert_same_cache(a, b):
    ma, mb = read_manifest(a), read_manifest(b)
    assert ma["complete"] and mb["complete"]
    assert [(e["file"], e["sha256"], e["lengths"]) for e in ma["shards"]] == [(e["file"], e["sha256"], e["lengths"]) for e in mb["shards"]]
    assert sorted(os.listdir(a)) == sorted(os.listdir(b))
    ca, cb = HiddenStateCache(a, checksum=True), HiddenStateCache(b, checksum=True)
    for i in range(len(ca)):
        for k in ("input_ids", "loss_mask", "taps", "final"): assert torch.equal(ca[i][k], cb[i][k])


@pytest.mark.parametrize("where,at", [("before_replace", 1), ("after_replace", 6),     # first shard, last shard
                                      *(pytest.param(w, a, marks=pytest.mark.slow)
                                        for w, a in (("before_replace", 3), ("after_replace", 3), ("before_replace", 4)))])
def test_sigkill_in_write_protocol_then_resume(tmp_path, reference, where, at):
    out = tmp_path / "cache"
    assert finish(child(out, where, at), out) == -signal.SIGKILL, log_tail(out)
    done = read_manifest(out)["shards"] if (out / "manifest.json").exists() else []
    assert len(done) == (at - 1) // 2 + (where == "after_replace" and at % 2 == 0)
    assert not (out / "manifest.json").exists() or not read_manifest(out)["complete"]
    if where == "before_replace": assert any(f.endswith(".tmp") for f in os.listdir(out))
    extract(out)
    assert_same_cache(out, reference)


def test_sigkill_at_random_moments_then_resume(tmp_path, reference):
    out = tmp_path / "cache"
    for delay in (0.4, 0.9, 1.3):   # whatever the machine's speed, each kill lands somewhere in (or after) the extraction
        p = child(out, slow=0.15)
        wait_ready(p, out)
        time.sleep(delay); p.send_signal(signal.SIGKILL); finish(p, out)
    extract(out)
    assert_same_cache(out, reference)


def test_damaged_shard_is_remade_on_resume(tmp_path, reference):
    out = extract(tmp_path / "cache")
    f = out / "shard-00002.safetensors"
    f.write_bytes(f.read_bytes()[:-7])
    with pytest.raises(ValueError, match="shard-00002.safetensors has .* Delete it and re-run"): HiddenStateCache(out)
    extract(out)
    assert_same_cache(out, reference)


def test_rerun_removes_leftover_temp_files(tmp_path, reference):
    "A kill inside safetensors' own save leaves its `.tmpXXXXXX` (and ours, `name.pid.tmp`); the rerun removes both."
    out = tmp_path / "cache"
    shutil.copytree(reference, out)
    for name in (".tmpuSg0tA", "shard-00001.safetensors.4242.tmp"): (out / name).write_bytes(b"half a shard")
    extract(out)
    assert_same_cache(out, reference)
