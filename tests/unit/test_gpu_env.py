"""A process pinned to a GPU and a torchrun script agree on its device."""

from mwrun.plan.environment import mwrun_env
from mwrun.plan.inventory import HostInventory
from mwrun.plan.placement import place
from mwrun.plan.topology import parse

TEXT = """\
version: 1
processes:
  trainer: {cmd: python train.py, replicas: 3, gpus: 1}
  pair: {cmd: python big.py, gpus: 2}
  cpu: {cmd: python tool.py}
worlds:
  w: {members: [trainer, pair, cpu]}
"""


def envs():
    topo = parse(TEXT, "t.yaml", "/base")
    plan = place(topo, {"localhost": HostInventory(True, (0, 1), tuple("01234567"))},
                 lambda addr, taken: 40000)
    return {name: mwrun_env(plan, name, run_id="r", control="c") for name in plan.processes}


def test_local_rank_indexes_the_processes_own_visible_gpus():
    found = envs()
    for i in range(3):
        env = found[f"trainer-{i}"]
        visible = env["CUDA_VISIBLE_DEVICES"].split(",")
        # torch.cuda.set_device(int(os.environ["LOCAL_RANK"])) must name a visible device
        assert int(env["LOCAL_RANK"]) < len(visible), env
        assert visible[int(env["LOCAL_RANK"])] == str(i)
        assert (env["LOCAL_RANK"], env["LOCAL_WORLD_SIZE"], env["RANK"]) == ("0", "1", str(i))
    pair = found["pair"]
    assert pair["CUDA_VISIBLE_DEVICES"] == "3,4" and pair["LOCAL_RANK"] == "0"


def test_a_process_without_gpus_keeps_its_index_on_the_host():
    cpu = envs()["cpu"]
    assert (cpu["LOCAL_RANK"], cpu["LOCAL_WORLD_SIZE"], cpu["CUDA_VISIBLE_DEVICES"]) == \
        ("4", "5", "")


def test_children_do_not_print_torchs_numpy_warning_unless_the_user_asks():
    from mwrun.plan.environment import process_env

    topo = parse(TEXT.replace("gpus: 1", "cpus: 1").replace("gpus: 2", "cpus: 1"), "t.yaml")
    plan = place(topo, {"localhost": HostInventory(True, tuple(range(8)), ())},
                 lambda addr, taken: 40000)
    quiet = process_env(plan, "cpu", {}, run_id="r", control="c")
    assert quiet["PYTHONWARNINGS"] == "ignore:Failed to initialize NumPy:UserWarning"
    mine = process_env(plan, "cpu", {"PYTHONWARNINGS": "default"}, run_id="r", control="c")
    assert mine["PYTHONWARNINGS"] == "ignore:Failed to initialize NumPy:UserWarning,default"


NCCL_TEXT = """\
version: 1
timeout: 20
processes:
  leader: {cmd: python lead.py, gpus: [0]}
  gpu: {cmd: python gpu.py, gpus: [1], env: {TORCH_NCCL_ASYNC_ERROR_HANDLING: "3"}}
  cpu: {cmd: python cpu.py}
worlds:
  fast: {members: [leader, gpu], backend: nccl, timeout: 5}
  slow: {members: [leader, gpu], backend: nccl, timeout: 45}
  side: {members: [leader, cpu]}
"""


def test_members_of_nccl_worlds_abort_only_the_communicator():
    from mwrun.plan.environment import process_env

    topo = parse(NCCL_TEXT, "t.yaml", "/base")
    plan = place(topo, {"localhost": HostInventory(True, (0, 1), tuple("0123"))},
                 lambda addr, taken: 40000)
    # the launcher's own shell says otherwise: the topology's word and mwrun's win
    shell = {"TORCH_NCCL_ASYNC_ERROR_HANDLING": "1"}
    leader = process_env(plan, "leader", shell, run_id="r", control="c")
    assert leader["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "2"  # CleanUpOnly: never the process
    assert leader["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"
    # the watchdog outwaits the longest call timeout of its nccl worlds (45 s)
    assert int(leader["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"]) >= 480
    assert int(leader["TORCH_NCCL_NONBLOCKING_TIMEOUT"]) == 45
    gpu = process_env(plan, "gpu", shell, run_id="r", control="c")
    assert gpu["TORCH_NCCL_ASYNC_ERROR_HANDLING"] == "3"  # the user's topology wins
    assert gpu["TORCH_NCCL_DUMP_ON_TIMEOUT"] == "0"
    cpu = process_env(plan, "cpu", {}, run_id="r", control="c")
    assert not any(k.startswith("TORCH_NCCL_") for k in cpu)  # in no nccl world


def test_the_heartbeat_timeout_stays_above_a_long_call_timeout():
    from mwrun.plan.environment import mwrun_env

    topo = parse(NCCL_TEXT.replace("timeout: 45", "timeout: 900")
                 .replace("timeout: 20", "timeout: 900"), "t.yaml", "/base")
    plan = place(topo, {"localhost": HostInventory(True, (0, 1), tuple("0123"))},
                 lambda addr, taken: 40000)
    env = mwrun_env(plan, "leader", run_id="r", control="c")
    assert int(env["TORCH_NCCL_HEARTBEAT_TIMEOUT_SEC"]) > 900 + 60
