"""The harness's Playwright config loads the repository's own config the way Playwright itself would, whatever
module system the repository's package uses (langflow: a TypeScript config with `import` statements in a
package without "type": "module", which Node's `import()` takes for CommonJS source and refuses)."""

from __future__ import annotations

import json

import pytest

from tasks_lib.core import paths
from tasks_lib.images import build as images

pytestmark = [pytest.mark.docker]

CONFIG_TS = """import { defineConfig } from '@playwright/test';
import path from 'path';

const dir: string = './specs';  // TypeScript syntax and an ES import: Playwright's Babel hook handles both
export default defineConfig({ testDir: dir, metadata: { fromRepo: path.basename(__dirname) } });
"""
SPEC = (
    "import { test } from '@playwright/test';\ntest('listed from the repository config', async () => {});\n"
)


@pytest.mark.parametrize("package_type", [None, "module"], ids=["commonjs-package", "module-package"])
def test_a_typescript_config_loads_in_either_module_system(
    demo_source, demo_repo, docker_engine, base_images, tmp_path, package_type
):
    spec = images.frontend_env_spec(
        demo_source, images.dependency_contents(demo_source, demo_repo, "HEAD", side="frontend")
    )
    image = images.ensure_env_image(spec).tag
    app = tmp_path / "app"
    (app / "specs").mkdir(parents=True)
    manifest = {"name": "app", "private": True} | ({"type": package_type} if package_type else {})
    (app / "package.json").write_text(json.dumps(manifest))
    (app / "playwright.config.ts").write_text(
        CONFIG_TS if package_type is None else CONFIG_TS.replace("__dirname", "import.meta.dirname")
    )
    (app / "specs" / "a.spec.ts").write_text(SPEC)
    tools = paths.containers_dir() / "frontend"
    out = docker_engine.containers.run(
        image,
        entrypoint=["sh", "-c"],
        command=[
            "cp -r /in /tmp/app && cd /tmp/app && ln -s /deps/frontend/node_modules node_modules && "
            "node node_modules/@playwright/test/cli.js test -c /pbench/tools/playwright.pbench.config.mjs --list"
        ],
        volumes={
            str(app): {"bind": "/in", "mode": "ro"},
            str(tools): {"bind": "/pbench/tools", "mode": "ro"},
        },
        environment={"PBENCH_OUT": "/tmp/out"},
        network_mode="none",
        user="65534:65534",
        remove=True,
        stderr=True,
    ).decode()
    assert "listed from the repository config" in out, out
    assert "Total: 1 test in 1 file" in out, out
