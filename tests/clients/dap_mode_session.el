;;; dap_mode_session.el --- one ptdebug session driven by Emacs dap-mode, in batch  -*- lexical-binding: t -*-

;; Role: the Emacs side of tests/clients/test_emacs_dap_mode.py.  It uses dap-mode (Debian's
;; elpa-dap-mode) as a user would: the source file is visited, a breakpoint is added with
;; `dap-breakpoint-add' on the line marked `@stop', a session is started with
;; `dap-start-debugging-noexpand' against `ptdebug dap', and once stopped the variable is read
;; through dap-mode's own `dap-request' (scopes, then variables) before `dap-continue'.
;; Everything seen is written as JSON lines to a transcript that the pytest side checks; this
;; script decides nothing itself.
;;
;; Environment:
;;   PTDEBUG_DAP_COMMAND  JSON array: the adapter's argv (stdio), e.g. [".venv/bin/ptdebug","dap"]
;;   PTDEBUG_LAUNCH       JSON object: the launch arguments (type, request, program, ...)
;;   PTDEBUG_SOURCE       the source file holding the `@stop' marker
;;   PTDEBUG_VARIABLE     the name of the local variable to read at the stop
;;   PTDEBUG_TRANSCRIPT   where the JSON lines go
;;   PTDEBUG_STEP_TIMEOUT seconds to wait for each phase (stop, end)
;;   PTDEBUG_EMACS_DIR    the private user-emacs-directory (the test's own temporary folder;
;;                        without it, a new one under the temporary directory)
;;   PTDEBUG_QUIT_AT      when set, Emacs quits mid-session as a user closing it would (no
;;                        continue, no disconnect, only Emacs's exit): "configuration" just
;;                        before dap-mode sends configurationDone, "stop" at the breakpoint

(require 'json)
(require 'cl-lib)

;; dap-mode and lsp-mode keep state under the user's Emacs directory; a private one keeps
;; the test from reading or writing the real user's breakpoints.
(setq user-emacs-directory
      (file-name-as-directory (or (getenv "PTDEBUG_EMACS_DIR")
                                  (make-temp-file "ptdebug-emacs-" t))))
(require 'dap-mode)
;; dap-mode 0.7 fault: `dap--breakpoint-filter-enabled' reads `dap-exception-breakpoints',
;; which only dap-ui.el defines ("always called with dap-ui loaded", its comment says); without
;; dap-ui every session with exception filters dies in void-variable after setBreakpoints.
(require 'dap-ui)
(setq dap-breakpoints-file (expand-file-name "dap-breakpoints" user-emacs-directory)
      dap-auto-show-output nil
      dap-print-io nil)

(defvar ptdebug-transcript (getenv "PTDEBUG_TRANSCRIPT"))
(defvar ptdebug-step-timeout (string-to-number (or (getenv "PTDEBUG_STEP_TIMEOUT") "40")))

(defun ptdebug-record (kind &rest fields)
  "Append one JSON line {kind: KIND, FIELDS...} to the transcript."
  (let ((json-encoding-pretty-print nil))
    (append-to-file (concat (json-encode (append (list :kind kind) fields)) "\n")
                    nil ptdebug-transcript)))

(defun ptdebug-fail (what)
  "Record WHAT as the failure and leave Emacs with status 1."
  (ptdebug-record "failure" :message what)
  (kill-emacs 1))

;; Every event dap-mode receives goes into the transcript, before dap-mode handles it.
(advice-add 'dap--on-event :before
            (lambda (_session event)
              (ptdebug-record "event" :event (gethash "event" event)
                              :body (or (gethash "body" event) :json-null))))

(when (equal (getenv "PTDEBUG_QUIT_AT") "configuration")
  ;; The breakpoints are set, the program waits for configurationDone: quit instead of sending it.
  (advice-add 'dap--send-configuration-done :override
              (lambda (&rest _)
                (ptdebug-record "quitting" :at "configuration")
                (kill-emacs 0))))

(defun ptdebug-wait-until (predicate what)
  "Run the event loop until PREDICATE holds; fail naming WHAT after the step timeout."
  (let ((deadline (+ (float-time) ptdebug-step-timeout)))
    (while (not (funcall predicate))
      (when (> (float-time) deadline)
        (ptdebug-fail (format "timed out after %ss waiting for %s" ptdebug-step-timeout what)))
      (accept-process-output nil 0.05))))

(defun ptdebug-read-variable (session frame name)
  "The value of local NAME in FRAME, read through dap-mode's requests."
  (let* ((scopes (gethash "scopes" (dap-request session "scopes" :frameId (gethash "id" frame))))
         (found nil))
    (cl-loop for scope across (if (vectorp scopes) scopes (vconcat scopes))
             until found
             do (let* ((body (dap-request session "variables"
                                          :variablesReference (gethash "variablesReference" scope)))
                       (variables (gethash "variables" body)))
                  (cl-loop for variable across (if (vectorp variables) variables (vconcat variables))
                           when (equal (gethash "name" variable) name)
                           do (setq found (gethash "value" variable)))))
    found))

(let* ((command (append (json-read-from-string (getenv "PTDEBUG_DAP_COMMAND")) nil))
       (launch (let ((json-object-type 'plist) (json-array-type 'vector))
                 (json-read-from-string (getenv "PTDEBUG_LAUNCH"))))
       (source (getenv "PTDEBUG_SOURCE"))
       (variable (getenv "PTDEBUG_VARIABLE"))
       session)
  ;; The breakpoint, as a user sets it: visit the file, go to the marked line, add it.
  (find-file source)
  (goto-char (point-min))
  ;; The marker ends the line (`# @stop' in Python, `// @stop' in Go).
  (unless (re-search-forward "\\(#\\|//\\) @stop$" nil t)
    (ptdebug-fail (format "no @stop marker in %s" source)))
  (beginning-of-line)
  (dap-breakpoint-add)
  (ptdebug-record "breakpoint" :file buffer-file-name :line (line-number-at-pos))

  (dap-start-debugging-noexpand
   (append (list :name "ptdebug" :dap-server-path command) launch))
  (setq session (dap--cur-session))
  (unless session (ptdebug-fail "dap-mode created no session"))

  ;; Stopped: dap-mode has fetched the stack and made the top frame the active one.
  (ptdebug-wait-until (lambda () (or (dap--debug-session-active-frame session)
                                     (not (dap--session-running session))))
                      "a stop at the breakpoint")
  (let ((frame (dap--debug-session-active-frame session)))
    (unless frame (ptdebug-fail "the session ended without stopping"))
    (ptdebug-record "stopped"
                    :path (gethash "path" (or (gethash "source" frame) (make-hash-table)))
                    :line (gethash "line" frame)
                    :name (gethash "name" frame)
                    :thread (dap--debug-session-thread-id session))
    (ptdebug-record "variable" :name variable
                    :value (or (ptdebug-read-variable session frame variable) :json-null)))

  (when (equal (getenv "PTDEBUG_QUIT_AT") "stop")
    (ptdebug-record "quitting" :at "stop")
    (kill-emacs 0))
  (dap-continue session (dap--debug-session-thread-id session))
  (ptdebug-wait-until (lambda () (not (dap--session-running session))) "the end of the session")
  (ptdebug-record "ended" :state (symbol-name (dap--debug-session-state session)))
  (kill-emacs 0))
