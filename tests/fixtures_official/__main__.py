from . import write_fixtures
import sys

for name, path in write_fixtures(sys.argv[1] if len(sys.argv) > 1 else "official_fixtures").items():
    print(name, path)
