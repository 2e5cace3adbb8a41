// safeshare analytics: the kiosk guard (see below). Runs before the page is parsed; needs nothing from it.
"use strict";

// Kiosk guard: nothing of the app opens outside its one tab. In the enclave's kiosk a second window or tab is an
// escape attempt (the watchdog closes it), and Shift/Ctrl/Alt/Meta + click, a middle click, Shift/Ctrl + Enter or a
// drag on a link or a submit button asks the browser for a new window, a new tab or a download. Such activations are
// cancelled before they reach the browser (capture phase, on the document, so nothing on the page can undo it); a plain
// click or Enter still follows the link or submits the form in the same tab. Links and forms have no context menu either
// ("Open link in new window"). This script is loaded in <head> without `defer`: its listeners are on `document`
// before any link of the page exists, so there is no moment of a loading page (first paint, a deferred script not yet
// run) in which a modified click gets through.
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
