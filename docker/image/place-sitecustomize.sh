#!/usr/bin/env bash
# Install vlgrpo's sitecustomize shim where this interpreter will actually import it (field case B18).
#
# Only the first `sitecustomize` on sys.path is imported. Debian/Ubuntu Pythons ship one in the standard
# library directory (/usr/lib/python3.X/sitecustomize.py -> /etc/python3.X/), which comes before any
# site-packages, so a shim in site-packages alone would never run. If the base already has one, the shim
# goes into that directory and `install-sitecustomize` keeps the base's file as vlgrpo_orig_sitecustomize.py,
# which the shim chains to. The .pth fallback always goes into site-packages (where .pth files are read).
# Writes what it did to $1 (JSON), read by docker/image/smoke.py and build_manifest.py.
set -Eeuo pipefail
out=${1:?usage: place-sitecustomize.sh OUT.json}
py=${PYTHON:-python3}

purelib=$("$py" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
existing=$("$py" -c 'import importlib.util as u; s = u.find_spec("sitecustomize"); print(s.origin if s and s.origin else "")')
base_target=""
[[ -n $existing ]] && base_target=$(readlink -f "$existing")

if [[ -n $existing && $(dirname "$existing") != "$purelib" ]]; then
  target=$(dirname "$existing")
  "$py" -m vlgrpo patches install-sitecustomize --site-packages "$target" --no-pth
  # .pth fallback in site-packages (the shim written there too is shadowed by the one above; harmless)
  "$py" -m vlgrpo patches install-sitecustomize --site-packages "$purelib"
else
  target=$purelib
  "$py" -m vlgrpo patches install-sitecustomize --site-packages "$target"
fi

shim="$target/sitecustomize.py"
kept=""
[[ -e $target/vlgrpo_orig_sitecustomize.py ]] && kept="$target/vlgrpo_orig_sitecustomize.py"
"$py" - "$out" "$shim" "$existing" "$base_target" "$kept" "$purelib" <<'PY'
import json, sys
out, shim, existing, base_target, kept, purelib = sys.argv[1:]
json.dump({"shim": shim, "base_sitecustomize": existing or None, "base_sitecustomize_target": base_target or None,
           "kept_as": kept or None, "pth_dir": purelib}, open(out, "w"), indent=2)
PY
echo "place-sitecustomize: shim $shim; base sitecustomize: ${existing:-none}${kept:+ (kept as $kept, chained)}"
