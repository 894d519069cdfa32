import sys

from autoloop.cli import main

if __name__ == "__main__":
    sys.exit(main())
