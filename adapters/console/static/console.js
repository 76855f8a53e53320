// saga console: keeps the task list current by polling the API, and sends
// the operators' actions. No library, nothing from another origin.
"use strict";
(function () {
  var csrfMeta = document.querySelector('meta[name="saga-csrf"]');
  var csrf = csrfMeta ? csrfMeta.content : "";

  function post(path, body) {
    var headers = { "Content-Type": "application/json" };
    if (csrf) headers["X-Saga-CSRF"] = csrf;
    return fetch(path, { method: "POST", headers: headers, body: JSON.stringify(body || {}), credentials: "same-origin" });
  }

  function cell(text) {
    var td = document.createElement("td");
    td.textContent = text == null ? "" : String(text);
    return td;
  }

  function stamp(iso) {
    return iso ? iso.replace("T", " ").replace(/(\.\d{3})\d*/, "$1").replace("Z", "") : "";
  }

  function row(t) {
    var tr = document.createElement("tr");
    tr.dataset.id = t.id;
    var id = document.createElement("td");
    var a = document.createElement("a");
    a.href = "/ui/tasks/" + encodeURIComponent(t.id);
    a.textContent = t.id;
    id.appendChild(a);
    tr.appendChild(id);
    var st = document.createElement("td");
    var span = document.createElement("span");
    span.className = "state " + String(t.state).toLowerCase();
    span.textContent = t.state;
    st.appendChild(span);
    tr.appendChild(st);
    tr.appendChild(cell(t.priority || "normal"));
    tr.appendChild(cell(t.workflow + " v" + t.workflowVersion));
    tr.appendChild(cell(t.failedStep));
    tr.appendChild(cell(stamp(t.submittedAt)));
    tr.appendChild(cell(t.reason));
    return tr;
  }

  // The list polls GET /api/tasks with the page's own query once a second:
  // the answer is one small JSON page, it needs no connection held open
  // (the API's write timeout would cut a stream), and it works through
  // every proxy. Polling stops while the tab is hidden.
  var table = document.getElementById("tasks");
  if (table) {
    var status = document.getElementById("live-status");
    var query = table.dataset.apiQuery;
    var busy = false;
    var refresh = function () {
      if (busy || document.hidden) return;
      busy = true;
      fetch("/api/tasks?" + query, { credentials: "same-origin", headers: { Accept: "application/json" } })
        .then(function (r) {
          if (!r.ok) throw new Error("HTTP " + r.status);
          return r.json();
        })
        .then(function (list) {
          var body = document.createElement("tbody");
          list.tasks.forEach(function (t) { body.appendChild(row(t)); });
          if (!list.tasks.length) {
            var tr = document.createElement("tr");
            tr.className = "empty";
            var td = cell("No task matches.");
            td.colSpan = 7;
            tr.appendChild(td);
            body.appendChild(tr);
          }
          table.replaceChild(body, table.tBodies[0]);
          status.textContent = "Live: updated " + new Date().toLocaleTimeString() + ".";
          table.dataset.updated = String(Date.now());
        })
        .catch(function (e) { status.textContent = "Live updates paused: " + e.message; })
        .finally(function () { busy = false; });
    };
    setInterval(refresh, 1000);
  }

  // The task page reloads when the task's revision moves on, so that the
  // timeline and the history follow what the scheduler does.
  var state = document.getElementById("task-state");
  var actions = document.querySelector(".actions");
  if (state && actions) {
    var id = actions.dataset.task;
    var revision = state.dataset.revision;
    setInterval(function () {
      if (document.hidden) return;
      fetch("/api/tasks/" + encodeURIComponent(id), { credentials: "same-origin" })
        .then(function (r) { return r.ok ? r.json() : null; })
        .then(function (t) {
          if (t && String(t.revision) !== revision) location.reload();
        })
        .catch(function () {});
    }, 1000);
    var said = document.getElementById("action-status");
    actions.querySelectorAll("button[data-action]").forEach(function (b) {
      b.addEventListener("click", function () {
        var what = b.dataset.action;
        if (what === "cancel" && !confirm("Cancel task " + id + " and compensate its steps?")) return;
        b.disabled = true;
        said.textContent = what + ": sending…";
        post("/api/tasks/" + encodeURIComponent(id) + "/" + what, {})
          .then(function (r) {
            return r.json().catch(function () { return {}; }).then(function (j) {
              said.textContent = r.ok ? what + " accepted; the page follows the task." : what + " refused (" + r.status + "): " + (j.error || "");
              if (!r.ok) b.disabled = false;
            });
          })
          .catch(function (e) { said.textContent = what + " failed: " + e.message; b.disabled = false; });
      });
    });
  }

  // The overview reloads itself: it is one server-rendered page of a few
  // numbers, drawn from samples the server keeps.
  var overview = document.getElementById("overview");
  if (overview) {
    setInterval(function () { if (!document.hidden) location.reload(); }, 1000 * Number(overview.dataset.refresh || 5));
  }

  var logout = document.getElementById("logout");
  if (logout) {
    logout.addEventListener("click", function () {
      post("/ui/logout").then(function () { location.href = "/ui/login"; });
    });
  }
})();
