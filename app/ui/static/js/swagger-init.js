// Starts the vendored Swagger UI on /openapi.json (no CDN, no validator call-out).
window.addEventListener("DOMContentLoaded", () => {
  const node = document.getElementById("swagger-ui");
  window.ui = window.SwaggerUIBundle({
    url: node.dataset.spec,
    domNode: node,
    validatorUrl: null,
    deepLinking: true,
    persistAuthorization: false,
    presets: [window.SwaggerUIBundle.presets.apis],
    layout: "BaseLayout",
  });
});
