"""Sign webhook deliveries with the providers' own libraries, for crates/gateway/tests/webhooks.rs.

Reads a JSON list of deliveries on stdin, each {"scheme", "secret", "body", "timestamp", "id"},
and writes the JSON list of the headers each delivery carries:

* standard-webhooks: the PyPI package `standardwebhooks` (`Webhook(secret).sign`);
* stripe: the PyPI package `stripe` (`WebhookSignature.generate_signature_header`);
* github: GitHub's documented algorithm (HMAC-SHA256 of the body, hex, `sha256=` prefix) with
  Python's own `hmac`: GitHub publishes no signing library.

None of this shares code with oncerpc.
"""
import hashlib
import hmac
import json
import sys
from datetime import datetime, timezone

import stripe
from standardwebhooks import Webhook


def sign(d):
    scheme, secret, body, ts = d["scheme"], d["secret"], d["body"], int(d["timestamp"])
    if scheme == "standard-webhooks":
        when = datetime.fromtimestamp(ts, tz=timezone.utc)
        sig = Webhook(secret).sign(msg_id=d["id"], timestamp=when, data=body)
        return {"webhook-id": d["id"], "webhook-timestamp": str(ts), "webhook-signature": sig}
    if scheme == "stripe":
        header = stripe.WebhookSignature.generate_signature_header(body, secret, timestamp=ts)
        return {"Stripe-Signature": header}
    if scheme == "github":
        mac = hmac.new(secret.encode("utf-8"), body.encode("utf-8"), hashlib.sha256).hexdigest()
        return {"X-Hub-Signature-256": "sha256=" + mac, "X-GitHub-Delivery": d["id"]}
    raise SystemExit(f"unknown scheme {scheme!r}")


json.dump([sign(d) for d in json.load(sys.stdin)], sys.stdout)
