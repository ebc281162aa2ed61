-- A policy that does nothing: what running a hook costs (bench/).
function on_request(h) end
