// Live refresh for the ops console: every element with data-refresh is replaced, every
// data-interval ms, by the server-rendered (and server-escaped) fragment at that URL.
// No framework, no build step.  A lost session (redirect to sign-in) reloads the page.
(function () {
  "use strict";
  function refresh(element) {
    var url = element.getAttribute("data-refresh");
    fetch(url, { credentials: "same-origin", cache: "no-store" })
      .then(function (response) {
        if (response.redirected || !response.ok) {
          window.location.reload();
          return null;
        }
        return response.text();
      })
      .then(function (html) {
        if (html === null) return;
        element.innerHTML = html;
        var stamp = document.getElementById("refreshed");
        if (stamp) stamp.textContent = "Last refresh " + new Date().toLocaleTimeString() + ".";
      })
      .catch(function () { /* the next tick tries again */ });
  }
  document.addEventListener("DOMContentLoaded", function () {
    var elements = document.querySelectorAll("[data-refresh]");
    elements.forEach(function (element) {
      var every = parseInt(element.getAttribute("data-interval") || "5000", 10);
      window.setInterval(function () { refresh(element); }, every);
    });
  });
})();
