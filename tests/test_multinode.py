"""Two machines on one: two torchrun processes (`--nnodes 2`, one rank each) meet at a c10d rendezvous on 127.0.0.1.

Each "machine" is a `Launch` in its own process group, as on a real node, and both share `out_dir` (the run refuses
to start otherwise). The tests show what several machines change: the command lines; a run where each rank reads its
own shard and only global rank 0 writes; a killed machine that stops the other within seconds with an error naming
it; and (slow) an unshared out_dir or unequal settings refused, a hung machine bounded by `--dist-timeout`, and a
2 x 1 run stopped and resumed that ends exactly as a 1 x 2 run.

A child here is `dflash-train` with a few functions wrapped (`CHILD`): it records the sample ids each rank reads and
who writes checkpoints and metrics, and can pause rank 0 before a checkpoint (so a stop always lands mid-run).
Nothing assumes a speed: every wait polls under a generous deadline, and every process started here is killed in a
`finally` (a rank dies with its torchrun: `die_with_parent`).
"""
import json, os, re, signal, socket, sys, textwrap, time
from pathlib import Path
import pytest
from dflash_nb.checkpoint import latest_checkpoint
from dflash_nb.cli import exit_status
from dflash_nb.launch import Launch, LaunchFailed, launch, torchrun_command, write_run_config
from dflash_nb.testing import tiny_drafter, tiny_hybrid
from dflash_nb.config import TrainConfig
from dflash_nb.batches import BatchPlan
from dflash_nb.distributed import Nodes
from dflash_nb.launch import relaunch_command, train_main, train_parser
from dflash_nb.train import read_metrics

DEADLINE = 600          # s for a run to start and finish: ~15 s on an idle 2-core box, far more on a busy one
BOUND = 120             # s a killed machine may take to stop the other one (measured: 2 to 7 s)
ENV = {"OMP_NUM_THREADS": "1"}

CHILD = textwrap.dedent("""
    import json, os, sys, time
    import dflash_nb.train as t, dflash_nb.launch as launch
    record, hold = os.environ.get("RECORD"), os.environ.get("HOLD_AT")
    def note(**kw):
        with open(os.path.join(record, f"rank-{os.environ['RANK']}.jsonl"), "a") as f: f.write(json.dumps(kw) + "\\n")
    if record:
        make_batch, save_checkpoint, log = t.make_batch, t.save_checkpoint, t.Trainer.log
        def reading(data, ids, *a, **k): note(read=[int(i) for i in ids]); return make_batch(data, ids, *a, **k)
        def saving(*a, **k): note(wrote="checkpoint"); return save_checkpoint(*a, **k)
        def logging(self, rec): note(wrote="metrics"); return log(self, rec)
        t.make_batch, t.save_checkpoint, t.Trainer.log = reading, saving, logging
        note(node=int(sys.argv[sys.argv.index("--node-rank") + 1]))
    if hold:
        real = os.replace
        def replace(src, dst):   # the last moment a stop may come: pause before installing checkpoint HOLD_AT
            if os.path.basename(str(dst)) == f"step-{int(hold):07d}": time.sleep(3600)
            real(src, dst)
        os.replace = replace
    launch.train_main(sys.argv[1:])
""")


@pytest.fixture(scope="module")
def target_dir(tmp_path_factory):
    "The tiny hybrid target (the one `tiny_cache` was extracted from) saved as a model directory."
    d = tmp_path_factory.mktemp("multinode") / "target"
    tiny_hybrid().model.save_pretrained(d)
    return d


@pytest.fixture
def config(target_dir, tiny_cache, tmp_path):
    "A tiny run's `TrainConfig` in `tmp_path/<name>`: batch 1 of the 8-sample cache, so 4 micro-batches per rank."
    def make(name: str = "run", **kw) -> TrainConfig:
        base = dict(target=str(target_dir), cache=str(tiny_cache.path), out_dir=str(tmp_path / name),
                    drafter=tiny_drafter(), num_anchors=8, batch_size=1, lr=3e-3, warmup=0.1, steps=6, log_every=1,
                    save_every=3, device="cpu", progress=False)
        return TrainConfig(**(base | kw))
    return make


def free_port() -> int:
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        return s.getsockname()[1]


def machines(cfg: TrainConfig, child: bool = False, extra=((), ()), env=None) -> list[Launch]:
    "Start machines 0 and 1 of `cfg` (`extra[r]`: machine r's dflash-train options); `child`: run `CHILD` instead."
    ep, runs = f"127.0.0.1:{free_port()}", []
    for r, more in enumerate(extra):
        path = write_run_config(cfg, Path(cfg.out_dir) / f"run-node-{r}.yaml")
        cmd = torchrun_command(path, 1, more, Nodes(2, r, ep, "test"))
        if child:
            script = Path(cfg.out_dir).parent / "child.py"
            script.write_text(CHILD)
            i = cmd.index("dflash_nb.launch")
            cmd = cmd[:i - 1] + [str(script)] + cmd[i + 1:]
        runs.append(Launch(cmd, cfg.out_dir, ENV | (env or {})))
    return runs


def end(runs: list[Launch]):
    "SIGKILL each run's process group (its torchrun; the ranks die with it) and reap it."
    for r in runs:
        if r.running: os.killpg(r.proc.pid, signal.SIGKILL)
        r.proc.wait()


def wait_until(cond, what: str, runs: list[Launch], timeout: float = DEADLINE):
    t0 = time.monotonic()
    while not (v := cond()):
        ended = [r for r in runs if not r.running]
        if ended or time.monotonic() - t0 > timeout:
            raise AssertionError(f"no {what}: " + ("\n".join(ended[0].tail(30)) if ended else f"after {timeout} s"))
        time.sleep(0.1)
    return v


def gone(pid: int) -> bool:
    "Whether process `pid` has ended (exited, or a zombie nobody has reaped yet)."
    try: return Path(f"/proc/{pid}/stat").read_text().rsplit(")", 1)[1].split()[0] in "ZX"
    except FileNotFoundError: return True


def children(pid: int) -> list[int]:
    "The processes whose parent is `pid` (torchrun's ranks run in sessions of their own)."
    def parent(p: Path) -> int | None:
        try: return int((p / "stat").read_text().rsplit(")", 1)[1].split()[1])
        except OSError: return None       # ended while we looked
    return [int(p.name) for p in Path("/proc").iterdir() if p.name.isdigit() and parent(p) == pid]


def test_command_lines(config, tmp_path):
    "Two machines' commands differ in the rendezvous host, log folder and node rank; the CLI hands over to them."
    cfg = config()
    path = write_run_config(cfg, tmp_path / "run.yaml")
    ep, flags = "node0.cluster:29400", ["--steps", "3", "--dist-timeout", "60.0"]
    cmds = [torchrun_command(path, 2, flags, Nodes(2, r, ep, "t")) for r in (0, 1)]
    assert [(a, b) for a, b in zip(*cmds) if a != b] == [
        ("is_host=1", "is_host=0"), (f"{cfg.out_dir}/logs/node-0", f"{cfg.out_dir}/logs/node-1"), ("0", "1")]
    cli = ["--config", str(path), *flags, "--nproc-per-node", "2", "--nnodes", "2", "--rdzv-endpoint", ep,
           "--rdzv-id", "t"]
    for r in (0, 1): assert relaunch_command(train_parser().parse_args(cli + ["--node-rank", str(r)])) == cmds[r]
    assert "--standalone" in torchrun_command(path, 2) and relaunch_command(train_parser().parse_args(cli[:2])) is None
    bad = {("--nnodes", "2"): "nnodes=2 needs rdzv_endpoint HOST:PORT",
           ("--nnodes", "0"): "nnodes=0 must be an integer >= 1",
           ("--nnodes", "2", "--node-rank", "2", "--rdzv-endpoint", ep): "node_rank=2 must be an integer in 0..1",
           ("--nnodes", "2", "--rdzv-endpoint", "node0:99999"): "must be HOST:PORT with a port in 1..65535",
           ("--rdzv-endpoint", ep): "is for nnodes > 1",
           ("--dist-timeout", "0"): "--dist-timeout 0.0 must be"}
    for args, msg in bad.items():
        code, err = exit_status(train_main, cli[:2] + list(args))
        assert code == 2 and err.startswith("dflash-train: error: ") and msg in err and err.count("\n") == 1, err


def test_two_machines_train_each_rank_its_shard_and_rank0_writes(config, tiny_cache, tmp_path):
    cfg, rec = config(), tmp_path / "record"
    rec.mkdir()
    runs = machines(cfg, child=True, env={"RECORD": str(rec)})
    try:
        assert [r.wait(DEADLINE) for r in runs] == [0, 0]
    finally: end(runs)
    notes = {r: [json.loads(line) for line in (rec / f"rank-{r}.jsonl").read_text().splitlines()] for r in (0, 1)}
    assert {notes[r][0]["node"] for r in (0, 1)} == {0, 1}                  # one rank on each machine
    for r in (0, 1):                                                       # each rank reads its shard, by global rank
        plan = BatchPlan(tiny_cache.lengths, cfg, r, 2)
        assert [n["read"] for n in notes[r] if "read" in n] == [plan[i] for i in range(cfg.steps)]
    per_epoch = BatchPlan(tiny_cache.lengths, cfg, 0, 2).per_epoch
    first_epoch = [i for r in (0, 1) for ids in [n["read"] for n in notes[r] if "read" in n][:per_epoch] for i in ids]
    assert sorted(first_epoch) == list(range(len(tiny_cache)))             # the shards split the data
    writes = {r: [n["wrote"] for n in notes[r] if "wrote" in n] for r in (0, 1)}
    assert writes[1] == [] and writes[0].count("metrics") == 6 and writes[0].count("checkpoint") == 2
    assert [m["step"] for m in read_metrics(cfg.out_dir)] == list(range(1, 7))
    st = json.loads((latest_checkpoint(cfg.out_dir) / "training_state.json").read_text())
    assert (st["step"], st["world_size"], len(set(st["rank_weight_digests"]))) == (6, 2, 1)
    said = [line for r in runs for line in r.lines() if line.startswith("last checkpoint:")]
    assert said == [f"last checkpoint: {latest_checkpoint(cfg.out_dir)}"]   # printed by global rank 0 only


@pytest.mark.parametrize("victim", [1, pytest.param(0, marks=pytest.mark.slow)])
def test_a_killed_machine_stops_the_other_and_is_named(config, victim):
    "Machine 0 starts from `launch`, machine 1 from the `dflash-train` CLI; `victim` is SIGKILLed mid-run."
    cfg, ep = config(steps=100_000, save_every=100_000), f"127.0.0.1:{free_port()}"
    path = write_run_config(cfg, Path(cfg.out_dir) / "run-node-1.yaml")
    cli = [sys.executable, "-m", "dflash_nb.launch", "--config", str(path),
           "--nnodes", "2", "--node-rank", "1", "--rdzv-endpoint", ep, "--rdzv-id", "test"]
    runs = [launch(cfg, 1, nodes=Nodes(2, 0, ep, "test"))]
    runs.append(Launch(cli, cfg.out_dir, ENV))          # `dflash-train --nnodes ...` hands over to torchrun (execv)
    try:
        wait_until(lambda: len(runs[0].metrics()) >= 2, "second logged step", runs)
        os.killpg(runs[victim].proc.pid, signal.SIGKILL)
        t0 = time.monotonic()
        with pytest.raises(LaunchFailed) as failed: runs[1 - victim].wait(BOUND)
        took, cause = time.monotonic() - t0, str(failed.value).split("\n")[0]
    finally: end(runs)
    assert took < BOUND and "exited with code 1: " in cause and "LostPeerError: rank " in cause, cause
    lost = re.search(rf"\(node {victim}, host [^,]+, pid (\d+)\)", cause.split("stopped after step")[1])
    assert lost and ("went away" in cause or "is gone" in cause), cause
    assert gone(int(lost[1]))                                               # the killed machine's rank died with it


@pytest.mark.slow
def test_unshared_out_dir_and_unequal_settings_are_refused(config, tmp_path):
    "Machine 1 writes elsewhere (as if out_dir were a local disk), then trains other steps: both machines refuse."
    cfg = config()
    for extra, said in [(["--out-dir", str(tmp_path / "elsewhere")], "is not one directory for all machines: "),
                        (["--steps", "7"], "The ranks run with different settings (values by rank): {'steps': [")]:
        runs = machines(cfg, extra=((), extra))
        try:
            for r in runs:
                with pytest.raises(LaunchFailed, match=re.escape(said)): r.wait(DEADLINE)
        finally: end(runs)
    assert latest_checkpoint(cfg.out_dir) is None and not (tmp_path / "elsewhere" / "checkpoints").exists()


@pytest.mark.slow
def test_a_hung_machine_is_bounded_by_dist_timeout(config):
    "Machine 1 (its torchrun and rank) is SIGSTOPped: machine 0's rank stops after --dist-timeout and names it."
    cfg = config(steps=100_000, save_every=100_000)
    runs = machines(cfg, extra=(["--dist-timeout", "10"],) * 2)
    stopped = []
    try:
        wait_until(lambda: len(runs[0].metrics()) >= 2, "second logged step", runs)
        stopped = [runs[1].proc.pid, *children(runs[1].proc.pid)]
        for pid in stopped: os.kill(pid, signal.SIGSTOP)
        t0 = time.monotonic()
        with pytest.raises(LaunchFailed) as failed: runs[0].wait(BOUND)
        took, cause = time.monotonic() - t0, str(failed.value).split("\n")[0]
    finally:
        for pid in stopped: os.kill(pid, signal.SIGKILL)
        end(runs)
    assert 10 <= took < 10 + BOUND and "Timed out waiting 10000ms" in cause, (took, cause)
    assert re.search(r"\(node 1, host [^,]+, pid \d+\)", cause.split("stopped after step")[1]), cause


@pytest.mark.slow
def test_two_machines_stopped_and_resumed_equal_one_machine(config):
    "2 machines x 1 rank, stopped after a checkpoint and relaunched, end as 1 machine x 2 ranks: metrics and weights."
    one = config("one", steps=12)
    whole = launch(one, 2)
    try: assert whole.wait(DEADLINE) == 0
    finally: end([whole])
    two = config("two", steps=12)
    runs = machines(two, child=True, env={"HOLD_AT": "9"})      # rank 0 pauses before checkpoint 9: the stop is mid-run
    try:
        wait_until(lambda: latest_checkpoint(two.out_dir), "first checkpoint", runs)
        for r in runs: os.killpg(r.proc.pid, signal.SIGTERM)
        for r in runs: r.proc.wait(DEADLINE)
    finally: end(runs)
    start = int(latest_checkpoint(two.out_dir).name.split("-")[1])
    assert start in (3, 6) and len(read_metrics(two.out_dir)) < 12, start
    runs = machines(two)
    try: assert [r.wait(DEADLINE) for r in runs] == [0, 0]
    finally: end(runs)
    timeless = lambda out: [{k: v for k, v in m.items() if k != "tokens_per_s"} for m in read_metrics(out)]
    assert [m["step"] for m in read_metrics(two.out_dir)] == list(range(1, 13))
    assert timeless(two.out_dir) == timeless(one.out_dir)
    state = lambda out: json.loads((latest_checkpoint(out) / "training_state.json").read_text())
    digests = lambda out: state(out)["rank_weight_digests"]
    assert digests(two.out_dir) == digests(one.out_dir)
