"""Which zygote may fork a process: only what an import could see must match."""

from mwrun.host.warm import serves, shared_env


def test_a_zygote_serves_environments_that_agree_on_what_its_imports_read():
    zygote = {"FLAVOUR": "plain", "OTHER": "a", "PATH": "/bin"}
    assert serves(zygote, ["FLAVOUR"], False, {**zygote, "OTHER": "b", "NEW": "1"})
    assert not serves(zygote, ["FLAVOUR"], False, {**zygote, "FLAVOUR": "spicy"})
    assert not serves(zygote, ["FLAVOUR"], False, {"OTHER": "a"})  # unset is a value too
    assert serves(zygote, None, False, {**zygote, "OTHER": "b"}) is None  # not said yet
    # Imports that looked at every variable: only the very same environment.
    assert serves(zygote, [], True, dict(zygote))
    assert not serves(zygote, [], True, {**zygote, "OTHER": "b"})


def test_what_the_interpreter_and_native_code_read_always_counts():
    zygote = {"PYTHONPATH": "/x", "OTHER": "a"}
    for name, value in (("PYTHONPATH", "/y"), ("LD_PRELOAD", "x.so"), ("LC_ALL", "C"),
                        ("OMP_PROC_BIND", "true"), ("TORCH_LOGS", "+dynamo"), ("HOME", "/h")):
        assert serves(zygote, [], False, {**zygote, name: value}) is False, name
        assert serves(zygote, None, False, {**zygote, name: value}) is False, name


def test_what_mwrun_sets_per_process_is_never_part_of_the_match():
    env = {"RANK": "3", "MASTER_PORT": "29500", "MWRUN_PROCESS": "a", "OMP_NUM_THREADS": "2",
           "TORCHELASTIC_RUN_ID": "r", "KEEP": "1"}
    assert shared_env(env) == {"KEEP": "1"}
