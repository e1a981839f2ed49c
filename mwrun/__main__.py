from mwrun.cli import main

main(prog_name="mwrun")
