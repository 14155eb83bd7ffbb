"""Only what pyproject.toml cannot say: ship the child-process start-up hook as a top-level .pth file.

``tilelens_startup.pth`` must land in site-packages itself (not inside the package) for Python to run it at
start-up; a wheel's root is site-packages, so build_py writes the file into the root of the build. An
editable wheel is assembled apart from build_py's output, so editable_wheel puts the file into it too (through
a setuptools method that is not public API: where it changes, an editable install lacks the .pth and
``tilelens record`` falls back to its PYTHONPATH hook). Its one line does nothing unless TILELENS_FOLLOW is
set (see tilelens/core/recording/child.py).
"""

from __future__ import annotations

import os

from setuptools import setup
from setuptools.command.build_py import build_py

PTH = "tilelens_startup.pth"
LINE = (
    "import os; os.environ.get('TILELENS_FOLLOW') and "
    "__import__('tilelens.core.recording.child', fromlist=['start']).start()\n"
)


class BuildWithStartupHook(build_py):
    def run(self) -> None:
        super().run()
        _write(self.build_lib)

    def get_outputs(self, include_bytecode: bool = True) -> list[str]:
        return [*super().get_outputs(include_bytecode), os.path.join(self.build_lib, PTH)]

    def get_output_mapping(self) -> dict[str, str]:
        mapping = dict(super().get_output_mapping())
        mapping[os.path.join(self.build_lib, PTH)] = PTH
        return mapping


def _write(folder: str) -> str:
    os.makedirs(folder, exist_ok=True)
    target = os.path.join(folder, PTH)
    with open(target, "w", encoding="utf-8") as f:
        f.write(LINE)
    return target


commands: dict[str, type] = {"build_py": BuildWithStartupHook}
try:
    from setuptools.command.editable_wheel import editable_wheel
except ImportError:  # an old setuptools: no PEP 660 editable installs to extend
    pass
else:
    if hasattr(editable_wheel, "_run_build_commands"):

        class EditableWithStartupHook(editable_wheel):  # type: ignore[misc, valid-type]
            def _run_build_commands(self, dist_name, unpacked_wheel, build_lib, tmp_dir):  # type: ignore[no-untyped-def]
                result = super()._run_build_commands(dist_name, unpacked_wheel, build_lib, tmp_dir)
                _write(unpacked_wheel)
                return result

        commands["editable_wheel"] = EditableWithStartupHook

setup(cmdclass=commands)
