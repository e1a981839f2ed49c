"""Another local user must not be able to stand in for a run's supervisor."""

import os
import sys

import pytest

from mwrun.errors import RunError
from mwrun.head.observe import rundir
from mwrun.head.serve import control

pytestmark = pytest.mark.timeout(60)
as_root = pytest.mark.skipif(os.geteuid() != 0, reason="needs root to act as another user")
NOBODY = 65534


def test_the_socket_folder_is_made_ours_alone(tmp_path):
    made = rundir.private_folder(tmp_path / "mwrun-1000")
    assert oct(made.stat().st_mode & 0o777) == "0o700"
    assert rundir.private_folder(made) == made  # ours already: used as it is


def test_a_folder_others_can_write_to_is_refused_with_a_clear_error(tmp_path):
    shared = tmp_path / "mwrun-1000"
    shared.mkdir()
    shared.chmod(0o777)  # as another user's mkdir would leave it
    with pytest.raises(RunError, match=r"mwrun-1000 is owned by uid \d+ with mode 0777;"
                                       r" mwrun keeps control sockets only in a folder"):
        control.listen(str(shared / "run.sock"))
    assert not (shared / "run.sock").exists()


def test_a_link_in_place_of_the_folder_is_refused(tmp_path):
    (tmp_path / "elsewhere").mkdir(mode=0o700)
    (tmp_path / "mwrun-1000").symlink_to(tmp_path / "elsewhere")
    with pytest.raises(RunError, match="mwrun-1000 is a link"):
        rundir.private_folder(tmp_path / "mwrun-1000")


@as_root
def test_a_folder_of_another_user_is_refused_even_if_private(tmp_path):
    theirs = tmp_path / "mwrun-0"
    theirs.mkdir(mode=0o700)
    os.chown(theirs, NOBODY, NOBODY)
    with pytest.raises(RunError, match=f"owned by uid {NOBODY} with mode 0700"):
        rundir.private_folder(theirs)


IMPOSTOR = """\
import os, socket, sys
sock = socket.socket(socket.AF_UNIX, socket.SOCK_STREAM)
sock.bind(sys.argv[1])
os.setgid(65534)
os.setuid(65534)
sock.listen(1)  # the peer credentials a client sees are taken here
print("ready", flush=True)
conn, _ = sock.accept()
conn.recv(4096)
conn.sendall(b'{"ok": true, "status": {"state": "finished"}}\\n')
"""


@as_root
def test_the_client_refuses_a_socket_that_another_user_answers(procs, tmp_path):
    path = str(tmp_path / "control.sock")
    impostor = procs.start([sys.executable, "-c", IMPOSTOR, path])
    impostor.expect(lambda line: line == "ready")
    with pytest.raises(RunError, match=f"refusing {path}: it is answered by uid {NOBODY}"):
        control.request(path, {"verb": "status"}, timeout=5)
    impostor.kill_group()


FAKE_SRUN = """#!{python}
# srun's stand-in: before the real agent starts, clients that know no secret connect
# back during the window and send hellos of every wrong shape.
import json, os, socket, struct, sys
argv = sys.argv[1:]
agent = argv[argv.index("--overlap") + 1:]
addr, port = agent[agent.index("--connect") + 1].rsplit(":", 1)
for hello in ({{"kind": "hello", "node": ["n1", "n2"], "proof": ["x"]}}, ["hello"],
              {{"kind": "hello", "node": "n1", "proof": "0" * 64}}, "garbage"):
    with socket.create_connection((addr, int(port))) as sock:
        sock.recv(65536)  # the challenge
        body = json.dumps(hello).encode()
        sock.sendall(struct.pack(">I", len(body)) + body)
        assert sock.recv(65536) == b"", "a client that proved nothing was answered"
os.environ["SLURMD_NODENAME"] = "n1"
os.execv(agent[0], agent)
"""


def test_a_malformed_unauthenticated_hello_in_the_connect_window_changes_nothing(
        tmp_path, monkeypatch):
    """Under Slurm, agents connect back to the head; whatever a client that knows no
    secret sends there is dropped without a trace (no traceback, no aborted launch) and
    the real agent that follows is taken as usual."""
    from mwrun.head.hosts import slurm
    from mwrun.plan.topology import parse

    srun = tmp_path / "srun"
    srun.write_text(FAKE_SRUN.format(python=sys.executable))
    srun.chmod(0o755)
    monkeypatch.setenv("PATH", f"{tmp_path}:{os.environ['PATH']}")
    topo = parse("version: 1\nlauncher: slurm\nhosts:\n  node1: {addr: 127.0.0.1}\n"
                 "processes:\n  p: {cmd: x}\nworlds:\n  w: {members: [p]}\n", "t.yaml")
    links, step = slurm.connect(topo, {"node1": "n1"}, "fence-test", timeout=60)
    try:
        assert list(links) == ["node1"]
        hello = links["node1"].hello
        assert hello["node"] == "n1" and hello["pid"] == step.pid  # the real one: exec'd
    finally:
        for link in links.values():
            link.close()
        slurm.end(step, wait=5.0)
