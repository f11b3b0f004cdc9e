from mt.cli.train import main

main()
