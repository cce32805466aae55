"""python -m tasks.oracle_language NAME: parameters, entropies and samples of an oracle language."""

from tasks.oracle_language import main

main()
