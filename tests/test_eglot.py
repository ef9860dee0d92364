"""A real editor: Emacs 28 in batch mode with Debian's elpa-eglot, configured with the block from
docs/editors.md as written (only its command pointed at this checkout), on ``profd serve --stdio``."""
import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import SRC
from daemon_util import drop, serve_cmd
from test_nvim import doc_block

EMACS = shutil.which("emacs")


def _has_eglot() -> bool:
    if EMACS is None:
        return False
    p = subprocess.run([EMACS, "-batch", "--eval", "(progn (require 'eglot) (princ \"ok\"))"],
                       capture_output=True, text=True, timeout=60)
    return p.stdout.strip() == "ok"


pytestmark = pytest.mark.skipif(not _has_eglot(), reason="emacs with eglot is not installed "
                                "(apt-get install -y emacs-nox elpa-eglot; .ci/run installs them)")

ELISP = r"""
(defun profd-test-wait (pred secs)
  (let ((deadline (+ (float-time) secs)))
    (while (and (not (funcall pred)) (< (float-time) deadline))
      (accept-process-output nil 0.1))
    (funcall pred)))
(defun profd-test-diags ()
  (vconcat (mapcar (lambda (d) (vector (line-number-at-pos (flymake-diagnostic-beg d))
                                        (flymake-diagnostic-text d)))
                   (flymake-diagnostics))))
(find-file (getenv "PROFD_TEST_A"))
(run-hooks 'post-command-hook)  ; eglot-ensure connects from post-command-hook: batch has no commands
(setq a-buf (current-buffer))
(profd-test-wait (lambda () (with-current-buffer a-buf (flymake-diagnostics))) 40)
(find-file (getenv "PROFD_TEST_B"))
(run-hooks 'post-command-hook)
(setq b-buf (current-buffer))
;; flymake asks its backends from an idle timer, which batch mode never fires: ask here
(profd-test-wait (lambda () (with-current-buffer b-buf
                              (or (flymake-diagnostics) (progn (flymake-start) nil)))) 40)
(setq server (with-current-buffer a-buf (eglot-current-server)))
(setq same (eq server (with-current-buffer b-buf (eglot-current-server))))
(setq hover (with-current-buffer a-buf
              (goto-char (point-min)) (forward-line 69)
              (plist-get (plist-get (jsonrpc-request server :textDocument/hover
                                                     (eglot--TextDocumentPositionParams))
                                    :contents) :value)))
(setq actions (with-current-buffer a-buf
                (jsonrpc-request server :textDocument/codeAction
                                 (list :textDocument (eglot--TextDocumentIdentifier)
                                       :range (list :start (list :line 67 :character 0)
                                                    :end (list :line 67 :character 0))
                                       :context (list :diagnostics [])))))
(setq applied nil)
(seq-doseq (act actions)
  (when (and (not applied) (string-match-p "set_to_none=True" (plist-get act :title)))
    (with-current-buffer a-buf (eglot--apply-workspace-edit (plist-get act :edit)))
    (setq applied (plist-get act :title))))
(with-temp-file (getenv "PROFD_TEST_OUT")
  (insert (json-encode
           (list :a (with-current-buffer a-buf (profd-test-diags))
                 :b (with-current-buffer b-buf (profd-test-diags))
                 :same (if same t :json-false)
                 :servers (length (hash-table-values eglot--servers-by-project))
                 :hover hover :applied applied
                 :text (with-current-buffer a-buf (buffer-substring-no-properties (point-min) (point-max)))))))
(kill-emacs 0)
"""


def test_emacs_eglot_with_the_documented_config(tmp_path):
    watch, state, src = tmp_path / "watch", tmp_path / "state", tmp_path / "src"
    watch.mkdir()
    shutil.copytree(SRC, src)  # a folder of its own: eglot's project is that folder
    drop(watch, "tinygpt_naive")
    init = doc_block("tested: tests/test_eglot.py", "elisp")
    init, n = re.subn(r'\("profd" "serve" "--stdio"\s+"--watch" ,\(expand-file-name "~/profiles"\)\)',
                      ',(split-string (getenv "PROFD_TEST_CMD") "\\\\n")', init)
    assert n == 1, "the documented config names its command once"
    (tmp_path / "init.el").write_text(init + ELISP)
    out = tmp_path / "out.json"
    a, b = str(src / "train_tinygpt.py"), str(src / "tinygpt.py")
    env = dict(os.environ, PROFD_TEST_CMD="\n".join(serve_cmd(watch, state, workspace=None)),
               PROFD_TEST_OUT=str(out), PROFD_TEST_A=a, PROFD_TEST_B=b, HOME=str(tmp_path))
    p = subprocess.run([EMACS, "-batch", "-l", str(tmp_path / "init.el")], capture_output=True,
                       text=True, timeout=180, cwd=str(src), env=env)
    assert out.exists(), p.stderr[-3000:]
    doc = json.loads(out.read_text())
    # one server for both buffers of the project; findings on the lines, once each
    assert doc["same"] is True and doc["servers"] == 1
    for side in ("a", "b"):
        keys = [tuple(d) for d in doc[side]]
        assert keys and len(keys) == len(set(keys)), f"buffer {side}: {doc[side]}"
    assert any(line == 70 and "device->host" in text for line, text in doc["a"])
    assert any(line == 34 and "fp32" in text for line, text in doc["b"])
    assert doc["hover"] and "GPU" in doc["hover"]
    # the quick fix edited the buffer to code that compiles
    assert doc["applied"]
    assert "zero_grad(set_to_none=True)" in doc["text"].splitlines()[67]
    compile(doc["text"], "train_tinygpt.py", "exec")
