"""The ops console: server-rendered pages at ``/ops/`` for people on call.

session.py    the signed session cookie and the CSRF tokens
guard.py      who is signed in (redirect to sign-in otherwise), form parsing, CSRF checks
timeline.py   a payment's history merged into one time-ordered list
routes.py     the pages and the forms; every action calls the same ops service functions
              as the ops API (orchestrator.ops.commands), never a second implementation
capture_forms.py  the capture and cancel forms (orchestrator.ops.captures, as the ops API)
templates/    Jinja2, autoescaped;  static/  CSS and the few lines of JS (live refresh)
"""
