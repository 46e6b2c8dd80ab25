"""The server's NATS connection (nats-py), the broker's ``NatsPort``: the link (:mod:`.link`),
opening it (:mod:`.connect`), its read side (:mod:`.read`, :mod:`.fast`) and write side
(:mod:`.write`, :mod:`.flush`). The wire codec is :mod:`jetserver.natsproto`."""
