// safeshare analytics: the cohort builder's live count. Pages work without this script; it only saves clicks.
"use strict";

// Kiosk guard: nothing of the app opens outside its one tab. In the enclave's kiosk a second window or tab is an
// escape attempt (the watchdog closes it), and Shift/Ctrl/Alt/Meta + click, a middle click, Shift/Ctrl + Enter or a
// drag on a link or a submit button asks the browser for a new window, a new tab or a download. Such activations are
// cancelled before they reach the browser (capture phase, on the document, so nothing on the page can undo it); a plain
// click or Enter still follows the link or submits the form in the same tab. Links and forms have no context menu either
// ("Open link in new window"). Registered at once (this script is deferred, the listeners go on `document`).
(function () {
  const ACTIVATORS = "a[href], area[href], button, input[type=submit], input[type=image]";
  function activator(event, selector) {
    const target = event.target;
    return target && target.closest ? target.closest(selector || ACTIVATORS) : null;
  }
  function modified(event) {
    return event.shiftKey || event.ctrlKey || event.altKey || event.metaKey;
  }
  function cancel(event) {
    event.preventDefault();
    event.stopImmediatePropagation();
  }
  document.addEventListener("click", function (event) {
    if ((event.button !== 0 || modified(event)) && activator(event)) cancel(event);
  }, true);
  document.addEventListener("auxclick", function (event) {
    if (activator(event)) cancel(event);
  }, true);
  document.addEventListener("mousedown", function (event) {
    if (event.button === 1) cancel(event); // no middle-click autoscroll or paste either
  }, true);
  // Chromium 156 sometimes still opens a focused link in a new window (Shift+Enter) or a background tab (Ctrl+Enter)
  // although the Enter's keydown is cancelled below (a race, seen in about half of the attempts). So a link gives up
  // the keyboard focus as soon as a modifier goes down on it: the Enter that follows finds no link to open. Tab and
  // Shift+Tab still move on from where the focus was.
  const MODIFIER_KEYS = ["Shift", "Control", "Alt", "Meta", "AltGraph", "OS"];
  document.addEventListener("keydown", function (event) {
    if (MODIFIER_KEYS.indexOf(event.key) < 0) return;
    const focused = document.activeElement;
    if (focused && focused.matches && focused.matches("a[href], area[href]")) focused.blur();
  }, true);
  document.addEventListener("keydown", function (event) {
    if (!modified(event)) return;
    // Enter follows a link or submits the form it is typed in; Space presses a button.
    if ((event.key === "Enter" && activator(event, ACTIVATORS + ", form")) || (event.key === " " && activator(event))) {
      cancel(event);
    }
  }, true);
  document.addEventListener("dragstart", function (event) {
    if (activator(event)) cancel(event);
  }, true);
  document.addEventListener("contextmenu", function (event) {
    if (activator(event)) cancel(event);
  }, true);
})();
(function () {
  const form = document.getElementById("cohort-form");
  if (!form) return;
  const countEl = document.getElementById("cohort-count");
  const percentEl = document.getElementById("cohort-percent");
  const descriptionEl = document.getElementById("cohort-description");
  const saveParams = document.getElementById("save-params");
  let sequence = 0;

  function query() {
    const filters = {};
    form.querySelectorAll('input[name="where"]:checked').forEach(function (box) {
      const at = box.value.indexOf("=");
      const name = box.value.slice(0, at);
      (filters[name] = filters[name] || []).push(box.value.slice(at + 1));
    });
    const exclude = form.querySelector('input[name="xs"]');
    return { filters: filters, exclude_suppressed: !!(exclude && exclude.checked), facets: true };
  }

  function showFacets(facets) {
    form.querySelectorAll("fieldset[data-attr]").forEach(function (card) {
      const counts = facets[card.dataset.attr];
      if (!counts) return;
      counts.forEach(function (n, i) {
        const el = document.getElementById("c-" + card.dataset.slug + "-" + i);
        if (!el) return;
        el.textContent = n.toLocaleString("en-US");
        el.parentElement.classList.toggle("zero", n === 0);
      });
    });
  }

  async function update() {
    const mine = ++sequence;
    const params = new URLSearchParams(new FormData(form)).toString();
    if (saveParams) saveParams.value = params;
    history.replaceState(null, "", "/cohort" + (params ? "?" + params : ""));
    form.classList.add("busy");
    try {
      const response = await fetch("/api/count", {
        method: "POST", headers: { "Content-Type": "application/json" }, body: JSON.stringify(query()),
        credentials: "same-origin", cache: "no-store",
      });
      const data = await response.json();
      if (mine !== sequence) return; // a newer request is on its way
      if (!response.ok) throw new Error(data.detail || response.statusText);
      countEl.textContent = data.count.toLocaleString("en-US");
      percentEl.textContent = data.percent.toFixed(1) + "%";
      descriptionEl.textContent = data.description;
      showFacets(data.facets || {});
    } catch (error) {
      if (mine === sequence) descriptionEl.textContent = "Could not count: " + error.message;
    } finally {
      if (mine === sequence) form.classList.remove("busy");
    }
  }

  form.addEventListener("change", update);
})();
