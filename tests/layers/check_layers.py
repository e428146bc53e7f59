#!/usr/bin/env python3
"""check_layers.py ROOT: the library layering of ARCHITECTURE.md holds in the tree at ROOT.

ARCHITECTURE.md holds the allowed arrows in a ```layers block, one library folder a line:
`folder: folder folder ...` (what it may use directly; uses are transitive). This checks that
  - the arrows form a DAG over folders that exist, and every library folder is listed;
  - the ```mermaid picture, when there is one, draws exactly these arrows ("a --> b" lines);
  - every `#include "x/..."` in a library folder names itself or a library beneath it;
  - no include climbs out of its folder ("../");
  - every hap_* library a folder's CMakeLists.txt links (hap_library DEPENDS / PRIVATE_DEPENDS)
    belongs to itself or to a folder beneath it.
Prints one line per violation ("FILE:LINE: ...") and exits 1 if any; prints a summary and exits 0
otherwise. Exit 2: ARCHITECTURE.md has no usable layers block."""
import os
import re
import sys

SOURCE_EXT = ('.c', '.h', '.cu')
NOT_LIBRARIES = {'tools', 'tests', 'docs', 'reports', 'scripts', 'cmake', 'datasets', '.git',
                 '.ci', 'build', 'build-asan'}


def read_architecture(root):
    path = os.path.join(root, 'ARCHITECTURE.md')
    try:
        text = open(path, encoding='utf-8').read()
    except OSError as e:
        sys.exit(f'check_layers: {path}: {e.strerror}')
    m = re.search(r'```layers\n(.*?)```', text, re.S)
    if not m:
        print(f'check_layers: {path}: no ```layers block (expected "folder: deps" lines)')
        sys.exit(2)
    arrows = {}
    for n, line in enumerate(m.group(1).splitlines(), 1):
        line = line.split('#', 1)[0].strip()
        if not line:
            continue
        if ':' not in line:
            print(f'check_layers: {path}: layers line {n}: expected "folder: deps", got "{line}"')
            sys.exit(2)
        name, deps = line.split(':', 1)
        arrows[name.strip()] = deps.split()
    return arrows, text


def check_picture(text, arrows, errors):
    """The mermaid picture's edges equal the layers block's arrows."""
    m = re.search(r'```mermaid\n(.*?)```', text, re.S)
    if not m:
        return
    drawn = set(re.findall(r'^\s*(\w+)\s*-->\s*(\w+)\s*$', m.group(1), re.M))
    listed = {(lib, d) for lib, deps in arrows.items() for d in deps}
    for a, b in sorted(drawn - listed):
        errors.append(f'ARCHITECTURE.md: the picture draws {a} --> {b}, the layers block does not')
    for a, b in sorted(listed - drawn):
        errors.append(f'ARCHITECTURE.md: the layers block has {a}: {b}, the picture does not draw it')


def closure(arrows, errors):
    """Transitive uses per folder; records cycles and unknown names in errors."""
    below = {}

    def visit(lib, stack):
        if lib in below:
            return below[lib]
        if lib in stack:
            errors.append(f'ARCHITECTURE.md: layers: cycle {" -> ".join(stack + [lib])}')
            return set()
        acc = set()
        for d in arrows.get(lib, []):
            if d not in arrows:
                errors.append(f'ARCHITECTURE.md: layers: {lib} uses unknown library "{d}"')
                continue
            acc |= {d} | visit(d, stack + [lib])
        below[lib] = acc
        return acc

    for lib in arrows:
        visit(lib, [])
    return below


def library_folders(root):
    """Top-level folders with a CMakeLists.txt that calls hap_library()."""
    out = {}
    for name in sorted(os.listdir(root)):
        cm = os.path.join(root, name, 'CMakeLists.txt')
        if name in NOT_LIBRARIES or not os.path.isfile(cm):
            continue
        text = open(cm, encoding='utf-8').read()
        targets = re.findall(r'hap_library\(\s*(\w+)', text)
        if targets:
            out[name] = (targets, text)
    return out


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else '.'
    errors = []
    arrows, text = read_architecture(root)
    below = closure(arrows, errors)
    check_picture(text, arrows, errors)
    libs = library_folders(root)
    for lib in libs:
        if lib not in arrows:
            errors.append(f'{lib}/CMakeLists.txt: library folder "{lib}" is not in the layers block')
    for lib in arrows:
        if lib not in libs:
            errors.append(f'ARCHITECTURE.md: layers: "{lib}" is not a library folder')
    target_folder = {t: lib for lib, (targets, _) in libs.items() for t in targets}

    n_includes = 0
    inc = re.compile(r'^\s*#\s*include\s*"([^"]+)"')
    for lib in libs:
        allowed = {lib} | below.get(lib, set())
        for dirpath, _, files in os.walk(os.path.join(root, lib)):
            for f in sorted(files):
                if not f.endswith(SOURCE_EXT):
                    continue
                path = os.path.join(dirpath, f)
                rel = os.path.relpath(path, root)
                for n, line in enumerate(open(path, encoding='utf-8', errors='replace'), 1):
                    m = inc.match(line)
                    if not m:
                        continue
                    n_includes += 1
                    target = m.group(1)
                    if '..' in target.split('/'):
                        errors.append(f'{rel}:{n}: #include "{target}" climbs out of its folder')
                        continue
                    prefix = target.split('/', 1)[0] if '/' in target else None
                    if prefix in arrows and prefix not in allowed:
                        errors.append(f'{rel}:{n}: #include "{target}": {lib} may not use '
                                      f'{prefix} (ARCHITECTURE.md layers: {lib} uses '
                                      f'{" ".join(sorted(below.get(lib, set()))) or "nothing"})')
        _, text = libs[lib]
        for call in re.findall(r'hap_library\((.*?)\)', text, re.S):
            for t in re.findall(r'\bhap_\w+', call)[1:]:
                if t in target_folder and target_folder[t] not in allowed:
                    errors.append(f'{lib}/CMakeLists.txt: links {t} ({target_folder[t]}), which '
                                  f'is not beneath {lib}')
    for e in errors:
        print(e)
    if errors:
        print(f'check_layers: {len(errors)} violation(s)')
        return 1
    print(f'check_layers: {len(libs)} libraries, {n_includes} includes, every arrow points down')
    return 0


if __name__ == '__main__':
    sys.exit(main())
