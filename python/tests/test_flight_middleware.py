"""A keyed client's data calls run on a plane, yet the middleware of both ends see them as
pyarrow's client would have made them: the question about planes not at all, the action asking
for a call's locations as that call; the plane call's context holds what the server's
middleware made for it, and a disguised action can reach nothing else."""

import pyarrow.flight as pf
import pytest

from wirespeed import flight
from conftest import KEY, plane, table

DO_GET = pf.FlightMethod.DO_GET


class ServerRecorder(pf.ServerMiddlewareFactory):
    def __init__(self) -> None:
        self.methods: list[pf.FlightMethod] = []
        self.completed: list[str] = []

    def start_call(self, info, headers):
        self.methods.append(info.method)
        return User(headers.get("x-user", ["nobody"])[0], self.completed)


class User(pf.ServerMiddleware):
    def __init__(self, name: str, completed: list[str]) -> None:
        self.name, self.completed = name, completed

    def call_completed(self, exception):
        self.completed.append(f"{self.name}: {exception}")


class ClientRecorder(pf.ClientMiddlewareFactory):
    def __init__(self, user: str) -> None:
        self.user, self.methods, self.completed = user, [], []

    def start_call(self, info):
        self.methods.append(info.method)
        return SendsUser(self.user, self.completed)


class SendsUser(pf.ClientMiddleware):
    def __init__(self, user: str, completed: list) -> None:
        self.user, self.completed = user, completed

    def sending_headers(self):
        return {"x-user": self.user}

    def call_completed(self, exception):
        self.completed.append(exception)


class Server(flight.FlightServerBase):
    def __init__(self, **kwargs) -> None:
        super().__init__(**kwargs)
        self.seen: list[tuple[str, str, bytes]] = []

    def do_get(self, context, ticket):
        self.seen.append((context.get_middleware("user").name, context.peer(), context.peer_identity()))
        if ticket.ticket == b"refused":
            raise pf.FlightUnauthorizedError("not for you")
        return flight.RecordBatchStream(table())

    def do_action(self, context, action):
        self.seen.append(("do_action ran", action.type, b""))
        return []


def test_middleware_see_a_data_call_once_as_itself_and_the_plane_call_holds_theirs():
    recorder = ServerRecorder()
    with Server(key=KEY, middleware={"user": recorder}) as server:
        for user in ["ada", "bob", "ada"]:
            mine = ClientRecorder(user)
            client = flight.connect(server.location, key=KEY, middleware=[mine])
            reader = client.do_get(pf.Ticket(b"t"))
            assert plane(reader) == "shm" and mine.completed == []
            assert reader.read_all().equals(table())
            assert mine.methods == [DO_GET] and mine.completed == [None]
        assert recorder.methods == [DO_GET] * 3
        assert [name for name, _, _ in server.seen] == ["ada", "bob", "ada"]
        assert all(peer.startswith("ipv") for _, peer, _ in server.seen)
        # Each call completes for the middleware once, when its handler has: failed ones too.
        assert recorder.completed == ["ada: None", "bob: None", "ada: None"]
        eve = ClientRecorder("eve")
        client = flight.connect(server.location, key=KEY, middleware=[eve])
        with pytest.raises(pf.FlightUnauthorizedError):
            client.do_get(pf.Ticket(b"refused")).read_all()
        assert recorder.completed[3:] == ["eve: not for you"]
        assert len(eve.completed) == 1 and "not for you" in str(eve.completed[0])


def test_an_action_dressed_as_a_data_call_reaches_no_handler():
    """A client holding the key may dress a DoAction as a DoGet for the middleware only to ask
    for locations: any other action so dressed is refused, before the service sees it."""
    with Server(key=KEY, middleware={"user": ServerRecorder()}) as server:
        hello = flight.FlightClient(server.location, key=KEY)._planes.hello()

        class Dressed(pf.ClientMiddlewareFactory):
            def start_call(self, info):
                return Headers()

        class Headers(pf.ClientMiddleware):
            def sending_headers(self):
                return {"x-wirespeed-hello": hello, "x-wirespeed-call": "get"}

        raw = pf.connect(server.location, middleware=[Dressed()])
        with pytest.raises(pf.FlightUnauthorizedError, match="asked for 'secret'"):
            list(raw.do_action(pf.Action("secret", b"")))
        assert server.seen == []


def test_a_plane_calls_context_sees_its_client_give_up():
    import threading
    import time

    seen = threading.Event()

    class Waiting(flight.FlightServerBase):
        def do_exchange(self, context, descriptor, reader, writer):
            assert not context.is_cancelled()
            deadline = time.time() + 20
            while not context.is_cancelled() and time.time() < deadline:
                time.sleep(0.05)
            if context.is_cancelled():
                seen.set()

    with Waiting(key=KEY) as server:
        client = flight.connect(server.location, key=KEY)
        writer, reader = client.do_exchange(pf.FlightDescriptor.for_command(b"x"))
        assert reader.plane == "shm"
        time.sleep(0.3)
        reader.cancel()
        assert seen.wait(10), "the handler never saw the call cancelled"
