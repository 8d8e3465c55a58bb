"""The whole graph over real HTTP: ingress -> preprocess -> OCR (batched, 0.25 GPU) -> postprocess."""

from __future__ import annotations

import concurrent.futures
import io

import pytest
from PIL import Image

from app.synthetic import render_text_page
from tests.conftest import TEST_ARGS, OCR_REPLICAS, TEST_LIMITS, pdf_bytes, png_bytes


def words(text: str) -> str:
    return " ".join(text.split()).lower()


def assert_error(response, status: int, code: str, *, retryable: bool = False) -> dict:
    assert response.status_code == status, response.text
    error = response.json()["error"]
    assert error["code"] == code
    assert error["retryable"] is retryable
    assert error["message"]
    return error


def test_image_ocr_returns_text_boxes_and_engine(client, invoice_png):
    response = client.post("/v1/ocr", files={"file": ("invoice.png", invoice_png, "image/png")})
    assert response.status_code == 200, response.text
    body = response.json()
    assert body["engine"]["name"] == "ppocr" and body["engine"]["version"]
    [page] = body["pages"]
    assert "invoice 4711" in words(page["text"])
    assert "57.80" in page["text"]
    assert (page["width"], page["height"]) == Image.open(io.BytesIO(invoice_png)).size
    first = page["blocks"][0]
    assert first["text"].startswith("INVOICE")
    x0, y0, x1, y1 = first["bbox"]
    assert 0 <= x0 < x1 <= page["width"] and 0 <= y0 < y1 <= page["height"]
    assert 0.5 < first["confidence"] <= 1
    assert page["markdown"].startswith("INVOICE 4711")
    assert body["text"] == page["text"]
    assert {"decode", "engine_batch", "postprocess"} <= set(page["timings_ms"])


def test_raw_body_upload_equals_multipart(client, invoice_png):
    raw = client.post("/v1/ocr", content=invoice_png, headers={"content-type": "image/png"})
    multipart = client.post("/v1/ocr", files={"file": ("a.png", invoice_png, "image/png")})
    assert raw.status_code == multipart.status_code == 200
    assert raw.json()["pages"][0]["blocks"] == multipart.json()["pages"][0]["blocks"]


def test_pdf_pages_come_back_in_order(client, three_page_pdf):
    response = client.post("/v1/ocr", files={"file": ("doc.pdf", three_page_pdf, "application/pdf")})
    assert response.status_code == 200, response.text
    pages = response.json()["pages"]
    assert [p["index"] for p in pages] == [0, 1, 2]
    assert [p["page_number"] for p in pages] == [1, 2, 3]
    for page, word in zip(pages, ("one", "two", "three")):
        assert f"page {word} of three" in words(page["text"])
        assert page["dpi"] == TEST_LIMITS["pdf_dpi"]
    assert words(response.json()["text"]).index("one") < words(response.json()["text"]).index("three")


def test_pdf_page_selection(client, three_page_pdf):
    response = client.post("/v1/ocr", params={"pages": "3,1"}, files={"file": ("d.pdf", three_page_pdf, "application/pdf")})
    assert response.status_code == 200, response.text
    pages = response.json()["pages"]
    assert [p["page_number"] for p in pages] == [1, 3]
    assert "page three" in words(pages[1]["text"])


def test_large_image_is_downscaled_but_boxes_stay_in_source_pixels(client):
    small = render_text_page(["Scaled text 2024"], width=900, font_size=40)
    big = small.resize((small.width * 3, small.height * 3), Image.Resampling.BICUBIC)  # 2700 px wide > 2000
    small_box = client.post("/v1/ocr", content=png_bytes(small), headers={"content-type": "image/png"}).json()
    big_page = client.post("/v1/ocr", content=png_bytes(big), headers={"content-type": "image/png"}).json()["pages"][0]
    assert big_page["width"] == big.width
    (sx0, sy0, sx1, sy1) = small_box["pages"][0]["blocks"][0]["bbox"]
    (bx0, by0, bx1, by1) = big_page["blocks"][0]["bbox"]
    # The engine saw the big page at 2000/2700 of its size; in engine pixels the box would
    # end near 2.2 x sx1. In source pixels it ends at 3 x sx1.
    assert abs(bx0 / 3 - sx0) < 8 and abs(bx1 / 3 - sx1) < 8 and abs(by1 / 3 - sy1) < 8
    assert bx1 > 2.8 * sx1


def test_concurrent_identical_requests_equal_one_and_share_batches(client, invoice_png):
    def post():
        return client.post("/v1/ocr", files={"file": ("i.png", invoice_png, "image/png")})

    single = post().json()["pages"][0]
    # 16 at once on 4 replicas: a page that finds its replica idle starts alone, the ones that
    # come while it runs wait to fill the next batch.
    with concurrent.futures.ThreadPoolExecutor(16) as pool:
        responses = list(pool.map(lambda _: post(), range(16)))
    assert all(r.status_code == 200 for r in responses)
    pages = [r.json()["pages"][0] for r in responses]
    for page in pages:
        assert page["text"] == single["text"]
        assert page["blocks"] == single["blocks"]
    batch_sizes = [page["batch"]["size"] for page in pages]
    assert max(batch_sizes) > 1, batch_sizes


def test_a_page_reaching_an_idle_replica_does_not_wait_for_a_batch_to_fill(client, invoice_png):
    """The session's batch_wait_timeout_s is 0.3 s: a lone page used to wait all of it."""
    waits = []
    for _ in range(3):  # one after another: each finds its replica idle
        answer = client.post("/v1/ocr", files={"file": ("i.png", invoice_png, "image/png")})
        assert answer.status_code == 200
        waits.append(answer.json()["pages"][0]["timings_ms"]["queue_wait"])
    assert max(waits) < 150, waits


@pytest.mark.parametrize(
    "send, status, code",
    [
        (lambda c: c.post("/v1/ocr"), 400, "empty_file"),
        (lambda c: c.post("/v1/ocr", files={"file": ("e.png", b"", "image/png")}), 400, "empty_file"),
        (lambda c: c.post("/v1/ocr", files={"other": ("x.png", b"123", "image/png")}), 400, "missing_file"),
        (
            lambda c: c.post("/v1/ocr", content=b"--x\r\nbroken", headers={"content-type": "multipart/form-data"}),
            400,
            "malformed_request",
        ),
        (lambda c: c.post("/v1/ocr", content=b"hello", headers={"content-type": "text/plain"}), 415, "unsupported_media_type"),
        (lambda c: c.post("/v1/ocr", content=b"PK\x03\x04zipdata", headers={"content-type": "application/octet-stream"}), 415, "unsupported_media_type"),
        (lambda c: c.post("/v1/ocr", content=b"\x89PNG\r\n\x1a\ngarbage", headers={"content-type": "image/png"}), 422, "corrupt_image"),
        (lambda c: c.post("/v1/ocr", content=b"%PDF-1.7\nnot really", headers={"content-type": "application/pdf"}), 422, "corrupt_pdf"),
        (lambda c: c.get("/v1/nothing"), 404, "not_found"),
    ],
    ids=["no-body", "empty-file", "no-file-field", "bad-multipart", "text", "zip", "corrupt-png", "corrupt-pdf", "404"],
)
def test_bad_requests_get_json_errors(client, send, status, code):
    assert_error(send(client), status, code)


def test_truncated_image_is_422(client, invoice_png):
    assert_error(client.post("/v1/ocr", content=invoice_png[: len(invoice_png) // 2], headers={"content-type": "image/png"}), 422, "corrupt_image")


def test_oversized_upload_is_413_naming_the_limit(client):
    body = b"\xff\xd8\xff" + b"0" * (TEST_LIMITS["max_upload_bytes"] + 10)
    error = assert_error(client.post("/v1/ocr", content=body, headers={"content-type": "image/jpeg"}), 413, "upload_too_large")
    assert "max_upload_bytes" in error["message"]


def test_decompression_bomb_is_413(client):
    bomb = Image.new("L", (6000, 6000), 255)  # 36 MP, tiny as a PNG, above max_image_pixels
    error = assert_error(client.post("/v1/ocr", content=png_bytes(bomb), headers={"content-type": "image/png"}), 413, "image_too_large")
    assert "max_image_pixels" in error["message"]


def test_too_many_pages_is_413(client):
    pdf = pdf_bytes([Image.new("RGB", (200, 200), "white")] * (TEST_LIMITS["max_pages"] + 1))
    error = assert_error(client.post("/v1/ocr", files={"file": ("m.pdf", pdf, "application/pdf")}), 413, "too_many_pages")
    assert "max_pages" in error["message"]


def test_bad_page_selection_is_400(client, three_page_pdf):
    response = client.post("/v1/ocr", params={"pages": "2-9"}, files={"file": ("d.pdf", three_page_pdf, "application/pdf")})
    assert_error(response, 400, "invalid_pages")


def test_encrypted_pdf_is_422(client, three_page_pdf):
    from pypdf import PdfReader, PdfWriter

    writer = PdfWriter(clone_from=PdfReader(io.BytesIO(three_page_pdf)))
    writer.encrypt(user_password="secret", algorithm="RC4-128")
    buffer = io.BytesIO()
    writer.write(buffer)
    error = assert_error(client.post("/v1/ocr", files={"file": ("e.pdf", buffer.getvalue(), "application/pdf")}), 422, "encrypted_pdf")
    assert "password" in error["message"]


def test_service_still_serves_after_bad_inputs(client, invoice_png):
    for _ in range(3):
        client.post("/v1/ocr", content=b"\x89PNG\r\n\x1a\nbad", headers={"content-type": "image/png"})
    response = client.post("/v1/ocr", files={"file": ("i.png", invoice_png, "image/png")})
    assert response.status_code == 200
    assert client.get("/readyz").json()["replicas"]["OCRModel"] == OCR_REPLICAS


def test_health_readiness_and_info(client):
    assert client.get("/healthz").json() == {"status": "ok"}
    ready = client.get("/readyz")
    assert ready.status_code == 200
    assert ready.json()["replicas"]["OCRModel"] == OCR_REPLICAS
    info = client.get("/v1/info").json()
    assert info["engine"]["name"] == "ppocr"
    assert info["engine"]["batching"]["max_batch_size"] == 8
    assert info["settings"]["limits"]["max_pages"] == TEST_LIMITS["max_pages"]
    assert info["settings"]["jobs"]["store"] == "sqlite"  # the kind, never the URL or path
    assert TEST_ARGS["jobs"]["store"].split("///")[1] not in client.get("/v1/info").text


def test_four_ocr_replicas_share_one_logical_gpu(ray_session, client):
    from ray import serve

    assert ray_session.cluster_resources()["GPU"] == 1
    assert ray_session.available_resources().get("GPU", 0) == 0  # 4 x 0.25 hold the whole GPU
    handle = serve.get_deployment_handle("OCRModel", app_name="ocr")
    placements = {}
    for _ in range(60):  # the router spreads calls; collect every replica's own view
        placement = handle.info.remote().result(timeout_s=30)["placement"]
        placements[placement["replica"]] = placement
        if len(placements) == OCR_REPLICAS:
            break
    assert len(placements) == OCR_REPLICAS
    assert {tuple(p["gpu_ids"]) for p in placements.values()} == {("0",)}
    assert all(p["resources"]["GPU"] == 0.25 for p in placements.values())
