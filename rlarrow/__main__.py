from rlarrow.cli import main

main()
