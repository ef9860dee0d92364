"""A real editor: Emacs 28 in batch mode with Debian's elpa-eglot, configured with the block from
docs/editors.md as written (only its command pointed at this checkout), on ``profd serve --stdio``:
a file opened before its trace lands and one opened after show the findings, hover and a quick
fix work, a newer trace replaces the findings, and a line added at the top and saved keeps every
finding on its statement."""

import json
import os
import re
import shutil
import subprocess

import pytest

from conftest import EXAMPLES, SRC
from daemon_util import serve_cmd
from test_nvim import doc_block

EMACS = shutil.which("emacs")


def _has_eglot() -> bool:
    if EMACS is None:
        return False
    p = subprocess.run(
        [EMACS, "-batch", "--eval", '(progn (require \'eglot) (princ "ok"))'],
        capture_output=True,
        text=True,
        timeout=60,
    )
    return p.stdout.strip() == "ok"


pytestmark = pytest.mark.skipif(
    not _has_eglot(),
    reason="emacs with eglot is not installed "
    "(apt-get install -y emacs-nox elpa-eglot; .ci/run installs them)",
)

ELISP = r"""
(defun profd-test-wait (pred secs)
  (let ((deadline (+ (float-time) secs)))
    (while (and (not (funcall pred)) (< (float-time) deadline))
      (accept-process-output nil 0.1))
    (funcall pred)))
(defun profd-test-diags ()
  (vconcat (mapcar (lambda (d) (save-excursion
                                 (goto-char (flymake-diagnostic-beg d))
                                 (vector (line-number-at-pos) (flymake-diagnostic-text d)
                                         (buffer-substring-no-properties (line-beginning-position)
                                                                         (line-end-position)))))
                   (flymake-diagnostics))))
;; flymake asks its backends from an idle timer, which batch mode never fires: ask here
(defun profd-test-shown (sbuf spred secs)  ; names of their own: this file binds dynamically
  (profd-test-wait (lambda () (with-current-buffer sbuf
                                (or (funcall spred (profd-test-diags)) (progn (flymake-start) nil)))) secs))
(defun profd-test-has (diags line re)
  (seq-some (lambda (d) (and (or (null line) (= (aref d 0) line)) (string-match-p re (aref d 1)))) diags))
(defun profd-test-drop (name)
  (let ((part (expand-file-name (concat "." name ".part") (getenv "PROFD_TEST_WATCH"))))
    (copy-file (expand-file-name (concat name ".json.gz") (getenv "PROFD_TEST_TRACES")) part t)
    (rename-file part (expand-file-name (concat name ".json.gz") (getenv "PROFD_TEST_WATCH")) t)))
(setq profd-ready 0)
(cl-defmethod eglot-handle-notification (_server (_method (eql profd/reportReady)) &rest _)
  (setq profd-ready (1+ profd-ready)))

(find-file (getenv "PROFD_TEST_A"))       ; opened before its trace lands
(run-hooks 'post-command-hook)  ; eglot-ensure connects from post-command-hook: batch has no commands
(setq a-buf (current-buffer))
(profd-test-wait (lambda () (with-current-buffer a-buf (eglot-current-server))) 40)
(profd-test-drop "tinygpt_naive")
(setq a-shown (profd-test-shown a-buf (lambda (ds) (profd-test-has ds 70 "device->host")) 60))
(find-file (getenv "PROFD_TEST_B"))       ; opened after
(run-hooks 'post-command-hook)
(setq b-buf (current-buffer))
(setq b-shown (profd-test-shown b-buf (lambda (ds) (profd-test-has ds 34 "fp32")) 40))
(setq server (with-current-buffer a-buf (eglot-current-server)))
(setq same (eq server (with-current-buffer b-buf (eglot-current-server))))
(setq a-diags (with-current-buffer a-buf (profd-test-diags)))
(setq b-diags (with-current-buffer b-buf (profd-test-diags)))
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
(setq a-text (with-current-buffer a-buf (buffer-substring-no-properties (point-min) (point-max))))
;; a newer trace replaces the findings
(setq n profd-ready)
(profd-test-drop "tinygpt_tuned")
(setq tuned (profd-test-shown b-buf (lambda (ds) (and (> profd-ready n) ds (not (profd-test-has ds nil "fp32")))) 60))
(setq b-tuned (with-current-buffer b-buf (profd-test-diags)))
;; an edit then a save: every finding stays on its statement
(with-current-buffer b-buf
  (goto-char (point-min))
  (insert "import os  # added after profiling\n")
  (save-buffer))
(profd-test-shown b-buf (lambda (ds) (and ds (not (seq-some (lambda (d) (= (aref d 0) 1)) ds))
                                         (> (aref (aref ds 0) 0) 1) nil)) 3)
(setq b-saved (with-current-buffer b-buf (profd-test-diags)))
(with-temp-file (getenv "PROFD_TEST_OUT")
  (insert (json-encode
           (list :a a-diags :b b-diags :a_shown (if a-shown t :json-false) :b_shown (if b-shown t :json-false)
                 :same (if same t :json-false)
                 :servers (length (hash-table-values eglot--servers-by-project))
                 :hover hover :applied applied :text a-text
                 :tuned (if tuned t :json-false) :b_tuned b-tuned :b_saved b-saved))))
(kill-emacs 0)
"""


def test_emacs_eglot_with_the_documented_config(tmp_path):
    watch, state, src = tmp_path / "watch", tmp_path / "state", tmp_path / "src"
    watch.mkdir()
    shutil.copytree(SRC, src)  # a folder of its own: eglot's project is that folder
    init = doc_block("tested: tests/test_eglot.py", "elisp")
    init, n = re.subn(
        r'\("profd" "serve" "--stdio"\s+"--watch" ,\(expand-file-name "~/profiles"\)\)',
        ',(split-string (getenv "PROFD_TEST_CMD") "\\\\n")',
        init,
    )
    assert n == 1, "the documented config names its command once"
    (tmp_path / "init.el").write_text(init + ELISP)
    out = tmp_path / "out.json"
    a, b = str(src / "train_tinygpt.py"), str(src / "tinygpt.py")
    env = dict(
        os.environ,
        PROFD_TEST_CMD="\n".join(serve_cmd(watch, state, workspace=None)),
        PROFD_TEST_OUT=str(out),
        PROFD_TEST_A=a,
        PROFD_TEST_B=b,
        HOME=str(tmp_path),
        PROFD_TEST_WATCH=str(watch),
        PROFD_TEST_TRACES=EXAMPLES,
    )
    p = subprocess.run(
        [EMACS, "-batch", "-l", str(tmp_path / "init.el")],
        capture_output=True,
        text=True,
        timeout=240,
        cwd=str(src),
        env=env,
    )
    assert out.exists(), p.stderr[-3000:]
    doc = json.loads(out.read_text())
    # opened before the trace landed, and after: shown
    assert doc["a_shown"] is True and doc["b_shown"] is True, doc
    # one server for both buffers of the project; findings on the lines, once each
    assert doc["same"] is True and doc["servers"] == 1
    for side in ("a", "b", "b_tuned"):
        keys = [tuple(d) for d in doc[side]]
        assert keys and len(keys) == len(set(keys)), f"buffer {side}: {doc[side]}"
    assert any(line == 70 and "device->host" in text for line, text, _ in doc["a"])
    assert any(line == 34 and "fp32" in text for line, text, _ in doc["b"])
    assert doc["hover"] and "GPU" in doc["hover"]
    # the quick fix edited the buffer to code that compiles
    assert doc["applied"]
    assert "zero_grad(set_to_none=True)" in doc["text"].splitlines()[67]
    compile(doc["text"], "train_tinygpt.py", "exec")
    # a newer trace replaced them
    assert doc["tuned"] is True and not any("fp32" in text for _, text, _ in doc["b_tuned"])
    # a line added at the top and saved: the same findings, each on its statement
    assert sorted((t, src) for _, t, src in doc["b_saved"]) == sorted(
        (t, src) for _, t, src in doc["b_tuned"]
    )
    assert all(line > 1 for line, _, _ in doc["b_saved"])
