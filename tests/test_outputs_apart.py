"""An output never overwrites an input (issue 49): every command refuses, before any work, an output that is one of
its inputs or lies inside an input directory, in one line with exit status 2, and leaves the input as it was."""
import pytest
from dflash_nb.cli import exit_status
from dflash_nb.config import TrainConfig
from dflash_nb.diagnose import diagnose_main
from dflash_nb.engine import serve_main
from dflash_nb.evaluate import eval_main
from dflash_nb.extract import extract_main
from dflash_nb.legacy import import_main
from dflash_nb.serving import export_main
from dflash_nb.study_config import StudyConfig
from dflash_nb.testing import tiny_drafter
from dflash_nb.train import Trainer

REFUSAL = "an output never overwrites an input"


@pytest.fixture
def inputs(tmp_path):
    "Stand-in input directories and files, each holding a file that must survive."
    for d in ("cache", "target", "drafter", "legacy"):
        (tmp_path / d).mkdir()
        (tmp_path / d / "config.json").write_text("keep")
    (tmp_path / "prompts.jsonl").write_text("keep")
    return tmp_path


def commands(d):
    "(main, argv) of each command with its output inside (or equal to) one of its inputs."
    return [
        (eval_main, ["--cache", d / "cache", "--target", d / "target", "--checkpoint", d / "drafter",
                     "--out", d / "cache" / "config.json"]),
        (eval_main, ["--cache", d / "cache", "--target", d / "target", "--checkpoint", d / "drafter",
                     "--out", d / "drafter" / "eval.json"]),
        (diagnose_main, ["--drafter", d / "drafter", "--cache", d / "cache", "--target", d / "target",
                         "--out", d / "target"]),
        (serve_main, ["--drafter", d / "drafter", "--target", d / "target", "--cache", d / "cache",
                      "--out", d / "cache" / "served"]),
        (export_main, ["--drafter", d / "drafter", "--out", d / "drafter" / "copy"]),
        (extract_main, ["--target", d / "target", "--prompts", d / "prompts.jsonl", "--out", d / "target" / "x"]),
        (import_main, ["--src", d / "legacy", "--out", d / "legacy" / "cache", "--target-hash", "0" * 16,
                       "--aux-layers", "1", "2", "--last-hidden", "final"]),
    ]


@pytest.mark.parametrize("k", range(7))
def test_command_refuses_output_inside_input(inputs, k):
    main, argv = commands(inputs)[k]
    code, err = exit_status(main, [str(a) for a in argv])
    assert code == 2 and REFUSAL in err and len(err.strip().splitlines()) == 1, err
    assert all((inputs / d / "config.json").read_text() == "keep" for d in ("cache", "target", "drafter", "legacy"))


def test_training_and_study_refuse_output_inside_input(inputs):
    cfg = TrainConfig(cache=str(inputs / "cache"), target=str(inputs / "target"), out_dir=str(inputs / "cache" / "run"),
                      drafter=tiny_drafter(), device="cpu")
    with pytest.raises(ValueError, match=REFUSAL): Trainer.from_config(cfg)
    with pytest.raises(ValueError, match=REFUSAL):
        StudyConfig(cache=str(inputs / "cache"), out_dir=str(inputs / "cache" / "study"),
                    variants={"a": {}}, seeds=[0]).validate()
