from pathlib import Path

ROOT = Path(__file__).resolve().parents[2]


def test_ci_runs_the_readme_test_command():
    readme = (ROOT / "README.rst").read_text()
    ci = (ROOT / ".ci" / "run").read_text()
    command = next(line.strip() for line in readme.splitlines()
                   if "pip install" in line and "pytest" in line)
    assert command in ci


def test_readme_demo_command_launches_a_shipped_config():
    readme = (ROOT / "README.rst").read_text()
    demo = next(line.strip() for line in readme.splitlines() if "mwrun launch configs/" in line)
    config = demo.split("mwrun launch ")[1].split()[0]
    assert (ROOT / config).is_file()
    assert "torch==2.13.0" in demo
