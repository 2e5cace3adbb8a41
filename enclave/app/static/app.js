// safeshare analytics: the cohort builder's live count. Pages work without this script; it only saves clicks.
// (The kiosk guard is guard.js, which runs before the page exists.)
"use strict";

(function () {
  const form = document.getElementById("cohort-form");
  if (!form) return;
  const countEl = document.getElementById("cohort-count");
  const percentEl = document.getElementById("cohort-percent");
  const descriptionEl = document.getElementById("cohort-description");
  const saveParams = document.getElementById("save-params");
  const outputParams = document.getElementById("output-params");
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
    if (outputParams) outputParams.value = params;
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
