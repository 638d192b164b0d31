;;; oncerpc-jsonrpc-test.el --- drive `oncerpc stdio' with Emacs's built-in jsonrpc.el  -*- lexical-binding: t; -*-

;; Run: ONCERPC_BIN=/path/to/oncerpc ONCERPC_STORE=sqlite:///tmp/x.db \
;;        emacs --batch -Q -l oncerpc-jsonrpc-test.el
;; Prints ONCERPC-EMACS-OK and exits 0 when every check passes; signals an error otherwise.

(require 'jsonrpc)
(require 'cl-lib)

(defun oncerpc-test--check (what got want)
  (unless (equal got want)
    (error "%s: got %S, want %S" what got want))
  (message "ok: %s" what))

(let* ((bin (or (getenv "ONCERPC_BIN") (error "ONCERPC_BIN is not set")))
       (store (or (getenv "ONCERPC_STORE") "memory://"))
       (proc (make-process :name "oncerpc"
                           :command (list bin "stdio" "--store" store)
                           :connection-type 'pipe
                           :coding 'utf-8-emacs-unix
                           :noquery t
                           :stderr (get-buffer-create "*oncerpc-stderr*")))
       (conn (jsonrpc-process-connection :name "oncerpc" :process proc)))
  (unwind-protect
      (progn
        ;; A request with a result.
        (oncerpc-test--check "subtract" (jsonrpc-request conn 'subtract [42 23]) 19)
        (oncerpc-test--check "named params"
                             (jsonrpc-request conn 'subtract '(:minuend 42 :subtrahend 23)) 19)
        ;; A notification: sent, never answered (the next request still pairs correctly).
        (jsonrpc-notify conn 'update [1 2 3 4 5])
        (oncerpc-test--check "after a notification" (jsonrpc-request conn 'sum [1 2 4]) 7)
        ;; An error surfaces as `jsonrpc-error'.
        (let ((code (condition-case err
                        (progn (jsonrpc-request conn 'no.such.method [])
                               (error "expected a jsonrpc-error"))
                      (jsonrpc-error (alist-get 'jsonrpc-error-code (cdr err))))))
          (oncerpc-test--check "unknown method is -32601" code -32601))
        (let ((code (condition-case err
                        (progn (jsonrpc-request conn 'demo.sleep '(:ms "soon"))
                               (error "expected a jsonrpc-error"))
                      (jsonrpc-error (alist-get 'jsonrpc-error-code (cdr err))))))
          (oncerpc-test--check "bad params are -32602" code -32602))
        ;; A retried command is counted once.
        (let* ((params '(:by 5 :idempotency_key "emacs-retry-1"))
               (first (jsonrpc-request conn 'counter.increment params))
               (again (jsonrpc-request conn 'counter.increment params))
               (total (jsonrpc-request conn 'counter.get [])))
          (oncerpc-test--check "first increment" (plist-get first :total) 5)
          (oncerpc-test--check "the retry gets the same outcome" again first)
          (oncerpc-test--check "counted once" (plist-get total :total) 5))
        (princ "ONCERPC-EMACS-OK\n"))
    (jsonrpc-shutdown conn)))
