/* Progressive enhancement only: every page works without this file. */
(function () {
  var KEY = "tarakan:theme";

  function stored() {
    try {
      return window.localStorage.getItem(KEY) || "system";
    } catch (e) {
      return "system";
    }
  }

  function apply(choice) {
    var root = document.documentElement;
    if (choice === "light" || choice === "dark") {
      root.setAttribute("data-theme", choice);
    } else {
      root.removeAttribute("data-theme");
    }
    var buttons = document.querySelectorAll("[data-theme-choice]");
    for (var i = 0; i < buttons.length; i++) {
      var b = buttons[i];
      b.setAttribute("aria-pressed", b.getAttribute("data-theme-choice") === choice ? "true" : "false");
    }
  }

  /* A table wider than its box scrolls sideways: say so (a visible cue) and let the keyboard scroll it. */
  function markScrollingTables() {
    var wraps = document.querySelectorAll(".table-wrap");
    for (var i = 0; i < wraps.length; i++) {
      var wrap = wraps[i];
      var scrolls = wrap.scrollWidth > wrap.clientWidth + 1;
      wrap.classList.toggle("table-wrap--scrolls", scrolls);
      if (scrolls) {
        wrap.setAttribute("tabindex", "0");
      } else {
        wrap.removeAttribute("tabindex");
      }
    }
  }

  function init() {
    apply(stored());
    markScrollingTables();
    window.addEventListener("resize", markScrollingTables);
    document.addEventListener("htmx:afterSettle", markScrollingTables);
    document.addEventListener("click", function (event) {
      var target = event.target;
      var button = target && target.closest ? target.closest("[data-theme-choice]") : null;
      if (!button) return;
      var choice = button.getAttribute("data-theme-choice");
      try {
        window.localStorage.setItem(KEY, choice);
      } catch (e) {
        /* storage blocked: the choice lasts for this page only */
      }
      apply(choice);
    });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", init);
  } else {
    init();
  }
})();
