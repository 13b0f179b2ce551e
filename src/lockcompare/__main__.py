"""``python -m lockcompare`` is the same as the ``lockcompare`` command."""

from lockcompare.cli import main

if __name__ == "__main__":
    main()
