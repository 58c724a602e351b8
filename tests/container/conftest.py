"""The hookd image, built once per test session from the working tree."""

from __future__ import annotations

import time

import pytest

from tests.support import containers


@pytest.fixture(scope="session")
def base_image() -> str:
    containers.require_engine()
    started = time.monotonic()
    tag = containers.base_image()
    print(f"\nbase image {tag}: built or found in {time.monotonic() - started:.1f} s")
    return tag


@pytest.fixture(scope="session")
def image(base_image: str, tmp_path_factory: pytest.TempPathFactory) -> str:
    started = time.monotonic()
    tag = containers.build_hookd_image(base_image, tmp_path_factory.mktemp("image"))
    print(
        f"\ncontainer image {tag}: {containers.image_size(tag) / 1e6:.0f} MB "
        f"(base {base_image}: {containers.image_size(base_image) / 1e6:.0f} MB), "
        f"built or found in {time.monotonic() - started:.1f} s"
    )
    return tag
