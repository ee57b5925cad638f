"""Shared test set-up: DDS stays on this machine, on a private domain per test session; the project's
markers (registered in setup.cfg: `ros`, and the tiers `integration` and `realtime`, see
test/README.md and test/tiers.py), applied from the fixtures a test uses and the tier table, and kept
out of the import when a `-m` expression leaves a whole module out; and the default tier's time
limit per test (``LOWRL_TEST_LIMIT_S``)."""
from __future__ import annotations

import ast
import atexit
import itertools
import os
import random
import shutil
import tempfile
from pathlib import Path

# Must happen before anything initialises rclpy (and is inherited by node subprocesses).
os.environ["ROS_AUTOMATIC_DISCOVERY_RANGE"] = "LOCALHOST"
os.environ["ROS_LOCALHOST_ONLY"] = "1"
if "LOWRL_TEST_DOMAIN_ID" in os.environ:
    os.environ["ROS_DOMAIN_ID"] = os.environ["LOWRL_TEST_DOMAIN_ID"]
else:
    # Private per session, inside 1..101 (higher ids collide with Linux ephemeral ports);
    # 0 (the default domain) and the Makefile's 61 are avoided.
    os.environ["ROS_DOMAIN_ID"] = str(random.SystemRandom().choice([d for d in range(1, 102) if d != 61]))

# stable-baselines3 makes an empty /tmp/SB3-<date> folder on every learn() unless told where to log:
# the tests' models log into one folder of their own, removed when the session ends.
_SB3_LOGDIR = tempfile.mkdtemp(prefix="lowrl-test-sb3-")
os.environ["SB3_LOGDIR"] = _SB3_LOGDIR
atexit.register(shutil.rmtree, _SB3_LOGDIR, True)

import pytest  # noqa: E402

# The project's own markers (setup.cfg registers them; --strict-markers refuses any other name).
MARKERS = ("ros", "integration", "realtime")
# A test that takes one of these fixtures gets the marker, wherever it lives: a node test cannot
# forget its `ros` mark.
FIXTURE_MARKS = {"ros_context": "ros"}


def pytest_collection_modifyitems(config, items):
    from tiers import tier_of  # test/tiers.py: the one table of which test runs in which tier

    for item in items:
        for fixture, mark in FIXTURE_MARKS.items():
            if fixture in item.fixturenames and item.get_closest_marker(mark) is None:
                item.add_marker(mark)
        tier = tier_of(item.nodeid)
        if tier is not None and item.get_closest_marker(tier) is None:
            item.add_marker(tier)


def module_marks(path: Path) -> set[str]:
    """The project markers of a test module's top-level ``pytestmark``, read from its source (not imported)."""
    try:
        tree = ast.parse(path.read_text(encoding="utf-8"))
    except (OSError, SyntaxError, ValueError):
        return set()
    marks = set()
    for node in tree.body:
        if isinstance(node, ast.Assign) and any(isinstance(t, ast.Name) and t.id == "pytestmark"
                                                for t in node.targets):
            for sub in ast.walk(node.value):
                # pytest.mark.NAME
                if (isinstance(sub, ast.Attribute) and sub.attr in MARKERS and isinstance(sub.value, ast.Attribute)
                        and sub.value.attr == "mark"):
                    marks.add(sub.attr)
    return marks


def pytest_ignore_collect(collection_path: Path, config):
    """Leave a module unimported when ``-m`` deselects every test it could hold.

    A module marked ``ros`` imports rclpy at its top: ``pytest -m "not ros"`` must run the core on a
    machine whose rclpy is broken or absent, so such a module is not even imported. Each test of the
    module carries the module's marks, plus any of the other project markers: the module is left out
    only when the expression is false for all of those combinations. None: pytest decides as usual.
    """
    markexpr = config.getoption("markexpr", default="")
    if not markexpr or collection_path.suffix != ".py" or not collection_path.name.startswith("test_"):
        return None
    marks = module_marks(collection_path)
    if not marks:
        return None
    from _pytest.mark.expression import Expression  # pytest's own -m parser, so both read it alike

    try:
        expr = Expression.compile(markexpr)
    except SyntaxError:
        return None  # pytest reports the bad expression itself
    others = [m for m in MARKERS if m not in marks]
    for n in range(len(others) + 1):
        for extra in itertools.combinations(others, n):
            present = marks | set(extra)
            if expr.evaluate(lambda name, /, **kwargs: not kwargs and name in present):
                return None
    return True


def time_limit() -> float:
    """The default tier's limit on each test phase, in seconds (0: none); `make test` sets 10."""
    try:
        return max(0.0, float(os.environ.get("LOWRL_TEST_LIMIT_S", "0") or 0))
    except ValueError:
        raise pytest.UsageError(f"LOWRL_TEST_LIMIT_S={os.environ['LOWRL_TEST_LIMIT_S']!r} is not a number "
                                "of seconds") from None


@pytest.hookimpl(hookwrapper=True)
def pytest_runtest_makereport(item, call):
    """Fail a passing test whose setup or call ran over the time limit (as Isaac Lab's per-test budgets).

    A test over the default tier's limit belongs in the `integration` or `realtime` tier, or must get
    faster: the default tier stays under 5 minutes on 2 cores (test/README.md)."""
    outcome = yield
    report = outcome.get_result()
    limit = time_limit()
    if limit and report.when in ("setup", "call") and report.passed and report.duration > limit:
        report.outcome = "failed"
        report.longrepr = (f"{item.nodeid}: {report.when} took {report.duration:.1f} s, over the default tier's "
                           f"{limit:g} s per test: make it faster, or mark it integration or realtime "
                           "(test/README.md, 'Tiers')")


@pytest.fixture
def ros_context():
    """A fresh rclpy context for one test, shut down afterwards."""
    import rclpy  # here, not at the top: the core tests (-m "not ros") never import rclpy

    ctx = rclpy.Context()
    rclpy.init(context=ctx)
    try:
        yield ctx
    finally:
        if ctx.ok():
            rclpy.shutdown(context=ctx)


@pytest.fixture
def key_file(tmp_path):
    """tmp_path/bundle.key holding fakes.KEY, mode 0600."""
    from fakes import write_key_file  # fakes imports rclpy: only the tests that ask for this load it

    return write_key_file(tmp_path)


# A real (tiny) `lowrl train` run: RLx2 SAC on Pendulum-v1, 300 steps. Enough for a policy and a
# kit with masks; its return means nothing.
TINY_TRAIN = dict(total_steps=300, warmup_steps=100, batch_size=32, hidden=32, eval_interval=300, eval_episodes=1,
                  mask_interval=20, buffer_min=150, buffer_check_size=64, buffer_check_interval=100,
                  checkpoint_interval=0, progress=False, variant="rlx2")


@pytest.fixture(scope="session")
def tiny_kit(tmp_path_factory):
    """(kit dir, its int8 artifact) from one tiny `lowrl train` run, shared by the session."""
    from lowrl_ros.core.finetune.kit import write_kit
    from lowrl_ros.core.train.config import TrainConfig
    from lowrl_ros.core.train.export import export_actor
    from lowrl_ros.core.train.trainer import Trainer

    run = tmp_path_factory.mktemp("tiny_run")
    trainer = Trainer(TrainConfig(**TINY_TRAIN), run)
    result = trainer.run()
    _, int8 = export_actor(trainer.agent, trainer.env, run, result.env_steps)
    return write_kit(run, tmp_path_factory.mktemp("tiny_kit"), artifact=int8), int8
