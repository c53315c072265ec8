"""The build beyond pyproject.toml's metadata: the packages under src/, their data files, and the optional C
extension quorumlog._hotpath (native/). Without a compiler the extension is skipped and quorumlog runs
its pure-Python versions of the same functions (quorumlog.hotpath)."""

from pathlib import Path

from setuptools import Extension, find_namespace_packages, setup

ROOT = Path(__file__).resolve().parent
PACKAGE = ROOT / "src" / "quorumlog"
CODE = {".py", ".pyc", ".pyo", ".so", ".pyd", ".c", ".h", ".o"}


def package_data() -> list[str]:
    """Every file under src/quorumlog that is not code (py.typed, stubs, the dashboard's static files...),
    found by glob at build time so that a new one ships without a change here."""
    return sorted(p.relative_to(PACKAGE).as_posix() for p in PACKAGE.rglob("*")
                  if p.is_file() and p.suffix not in CODE and "__pycache__" not in p.parts)


setup(
    package_dir={"": "src"},
    # Namespace packages too: a folder of data files (server/dashboard/static) is importable, so it is listed.
    packages=find_namespace_packages("src", include=["quorumlog", "quorumlog.*"], exclude=["*.__pycache__"]),
    package_data={"quorumlog": package_data()},
    ext_modules=[
        Extension(
            "quorumlog._hotpath",
            sources=[f"native/{name}.c" for name in ("module", "encode", "verify", "walk", "crc32")],
            depends=["native/hotpath.h", "native/crc32.h"],
            extra_compile_args=["-O2", "-Wall", "-Wextra"],
            optional=True,
        ),
    ],
)
