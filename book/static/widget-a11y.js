/*
 * Accessible names for the widgets' sliders.
 *
 * @jupyter-widgets/html-manager draws an ipywidgets slider as a visible <label> next to a noUiSlider
 * handle (<div role="slider">) and does not tie the two together, so a screen reader announces an
 * unnamed slider (axe-core: "aria-input-field-name"). Once the widgets are drawn, each handle gets
 * aria-labelledby pointing at its widget's label (given an id if it has none). A label that the
 * embedder leaves with the tooltip "null" loses that title, which would otherwise show on hover.
 *
 * Loaded (by nb_ipywidgets_js in _config.yml) after embed.js, on pages that have widgets.
 */
(function () {
  "use strict";

  var counter = 0;

  function nameHandles(root) {
    var handles = root.querySelectorAll('.widget-slider [role="slider"]');
    for (var i = 0; i < handles.length; i++) {
      var handle = handles[i];
      if (handle.hasAttribute("aria-labelledby") || handle.hasAttribute("aria-label")) {
        continue;
      }
      var label = handle.closest(".widget-slider").querySelector(".widget-label");
      if (!label || !label.textContent.trim()) {
        continue; // nothing visible to point at: leave it for the accessibility check to report
      }
      if (!label.id) {
        counter += 1;
        label.id = "widget-slider-label-" + counter;
      }
      handle.setAttribute("aria-labelledby", label.id);
    }
    var labels = root.querySelectorAll('.widget-label[title="null"]');
    for (var j = 0; j < labels.length; j++) {
      labels[j].removeAttribute("title");
    }
  }

  function start() {
    nameHandles(document);
    new MutationObserver(function () {
      nameHandles(document);
    }).observe(document.body, { childList: true, subtree: true });
  }

  if (document.readyState === "loading") {
    document.addEventListener("DOMContentLoaded", start);
  } else {
    start();
  }
})();
