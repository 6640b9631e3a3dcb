"""dup-env.py NAME=VALUE... -- COMMAND [ARG...]: exec COMMAND with this process's environment plus the given
entries appended as they are, so that a name given twice (or one already set) appears twice in the new process's
environment. execve(2) allows that and an env file, a job template or a launcher that builds envp by hand can
produce it; setenv(3), env(1) and os.execve never do, hence ctypes."""

import ctypes
import os
import shutil
import sys

sep = sys.argv.index("--")
extra, cmd = sys.argv[1:sep], sys.argv[sep + 1 :]
env = [k + b"=" + v for k, v in os.environb.items()] + [os.fsencode(e) for e in extra]
path = shutil.which(cmd[0]) or cmd[0]
argv = (ctypes.c_char_p * (len(cmd) + 1))(*[os.fsencode(a) for a in cmd], None)
envp = (ctypes.c_char_p * (len(env) + 1))(*env, None)
libc = ctypes.CDLL(None, use_errno=True)
sys.stdout.flush()
libc.execve(os.fsencode(path), argv, envp)
sys.exit(f"dup-env.py: execve {path}: {os.strerror(ctypes.get_errno())}")
