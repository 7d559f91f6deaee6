from rlarrow.cli.commands import main

main()
