"""The ops console: server-rendered pages at ``/ops/`` for people on call.

session.py            the signed session cookie and the CSRF tokens
guard.py              who is signed in (redirect to sign-in otherwise), form parsing, CSRF checks
rendering.py          templates, their filters, the security headers of every answer
sign_in_pages.py      sign-in and sign-out
overview_pages.py     the overview and the queues
payment_pages.py      the payments list, a payment's page, its takeover and retry forms
capture_forms.py      the capture and cancel forms (orchestrator.ops.captures, as the ops API)
webhook_pages.py      the endpoints, an event's deliveries, the redeliver form
timeline.py           a payment's history merged into one time-ordered list
install.py            the console on the app (routers, static files, sign-in redirect)
templates/    Jinja2, autoescaped;  static/  CSS and the few lines of JS (live refresh)

Every action calls the same ops functions as the ops API (orchestrator.ops), never a second
implementation.
"""
