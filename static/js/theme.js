/* Runs in <head> before first paint: apply the stored theme (light | dark | system) so the page never flashes. */
(function () {
  var root = document.documentElement;
  root.classList.add("js");
  var choice = "system";
  try {
    choice = window.localStorage.getItem("tarakan:theme") || "system";
  } catch (e) {
    /* storage blocked: follow the system */
  }
  if (choice === "light" || choice === "dark") {
    root.setAttribute("data-theme", choice);
  } else {
    root.removeAttribute("data-theme");
  }
})();
