"""Small process-wide primitives the server's packages share: hop marks (:mod:`.hops`), the
lazy event (:mod:`.lazy_event`), runtime settings (:mod:`.runtime`) and operating-system
resources (:mod:`.resources`)."""
