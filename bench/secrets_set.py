"""A labelled set for `bench.secrets` (written for Engram, no outside source): chat messages and
event texts that give a credential or a card number (each with the value that must not be
kept), and benign ones that talk about passwords, PINs and numbers without giving one (IBANs,
phone, order and customer numbers, prices, dates, "pin" and "token" as ordinary words), in
English and German. The card numbers are the networks' published test numbers. The tuned set was
written alongside the rules (`engram.domain.secrets`); the held-out set afterwards, and never
used to tune them."""

from __future__ import annotations

SECRETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    # English
    ("My wifi password is Sonnenblume7, can you remember that?", ("Sonnenblume7",)),
    ("the password is swordfish.", ("swordfish",)),
    ("Login for the portal: user anna.k, password: hunter2!", ("hunter2",)),
    ("My PIN is 4711 but I keep forgetting it", ("4711",)),
    ("PIN 8520 for the garage door", ("8520",)),
    ('The password for my bank is "Blue Sea 9" by the way', ("Blue Sea 9",)),
    ("I changed my password to Tulpe#22 yesterday.", ("Tulpe#22",)),
    ("Our API key is sk-ant-api03-abcdefghijklmnopqrstuvwxyz012345", ("abcdefghijklmnopqrstuvwxyz012345",)),
    ("the api key is 9f8e7d6c5b4a39281706f5e4d3c2b1a0", ("9f8e7d6c5b4a39281706f5e4d3c2b1a0",)),
    ("Can you store my card? 4111 1111 1111 1111, expires 12/27", ("4111 1111 1111 1111",)),
    ("Paid with 5555-5555-5555-4444 last week", ("5555-5555-5555-4444",)),
    ("card number 378282246310005 for the company account", ("378282246310005",)),
    ("The security code is 737.", ("737",)),
    ("CVV: 123, please keep it", ("123",)),
    ("the one-time code was 884213", ("884213",)),
    ("Here is the token: ghp_16C7e42F292c6912E7710c838347Ae178B4a", ("ghp_16C7e42F292c6912E7710c838347Ae178B4a",)),
    ("my router's admin passphrase is correct-horse-battery-staple", ("correct-horse-battery-staple",)),
    ("Access token = eyJhbGciOiJIUzI1NiJ9.eyJzdWIiOiIxMjMifQ.c2lnbmF0dXJl", ("eyJzdWIiOiIxMjMifQ",)),
    ("The passcode for the office alarm is 2580#", ("2580#",)),
    ("Use postgres://app:S3cretPw@db.internal:5432/crm for the import", ("S3cretPw",)),
    # German
    ("Das WLAN-Passwort lautet Sonnenblume7.", ("Sonnenblume7",)),
    ("Meine PIN ist 1234, bitte merken", ("1234",)),
    ("Mein Bankpasswort ist geheim123 und die TAN 445566", ("geheim123", "445566")),
    ("Passwort: Sommer2024!", ("Sommer2024",)),
    ("meine Geheimzahl ist 0815", ("0815",)),
    ("Ich habe die PIN auf 9876 geändert", ("9876",)),
    ("Das Kennwort für den Drucker ist drucker42", ("drucker42",)),
    ("PIN-Code 3691 für das Tor", ("3691",)),
    ("Die Kreditkarte ist 4000 0566 5566 5556, gültig bis 03/28", ("4000 0566 5566 5556",)),
    ("Zahlung mit Karte 5200828282828210 erfolgt", ("5200828282828210",)),
    ("Der Zugangscode zum Büro lautet 7788.", ("7788",)),
    ("Der API-Schlüssel ist a1b2c3d4e5f6g7h8", ("a1b2c3d4e5f6g7h8",)),
    ('Das Passwort vom Router lautet "Blaue Tür 5"', ("Blaue Tür 5",)),
    ("Sicherheitscode: 4821", ("4821",)),
    ("Merk dir mein Passwort: Tannenbaum!", ("Tannenbaum",)),
)

BENIGN: tuple[str, ...] = (
    # English
    "My password is too long to type on the phone.",
    "My password expired, how do I reset it?",
    "I reset my password yesterday and it works again.",
    "The password for the wifi is still the same as last year.",
    "I sent the password to Tom.",
    "Please never store passwords in the CRM notes.",
    "Can you pin the meeting notes to the channel?",
    "Pin the map to the wall in room 4.",
    "She gave me a token of appreciation after the project.",
    "Tan is 34 years old and lives in Singapore.",
    "Our order 1234567890123456 shipped on Monday.",
    "My IBAN is DE89 3704 0044 0532 0130 00.",
    "Call me on +49 1512 3456789 after five.",
    "Customer number 4711-0815 wants a callback.",
    "The invoice total is 1,234.56 EUR, due on 2026-03-01.",
    "I read 34 books in 2023 and 41 in 2024.",
    "The PIN pad at the front desk is broken.",
    "Two-factor codes come by SMS now.",
    "The tracking number is 00340434161234567890.",
    "We met at 10:30 in building 7, floor 3.",
    # German
    "Mein Passwort ist abgelaufen, wie setze ich es zurück?",
    "Das Passwort ist zu lang für das Handy.",
    "Ich habe mein Passwort vergessen.",
    "Die TAN kommt jetzt per App statt per SMS.",
    "Bitte keine Passwörter in die Notizen schreiben.",
    "Meine IBAN lautet DE02 1203 0000 0000 2020 51.",
    "Ruf mich unter 0151 23456789 an.",
    "Die Kundennummer ist 4711-0815.",
    "Auftrag 1234567890123456 wurde heute versandt.",
    "Der Termin ist am 3. Juni um 14 Uhr.",
    "Das Spinnrad steht im Keller.",
    "Die Rechnung über 1.234,56 Euro ist bezahlt.",
    "Ich lese gerade ein Buch über Datensicherheit und Passwortmanager.",
    "Die PIN ist sicher, sagt die Bank.",
    "Das Kennwort muss mindestens zwölf Zeichen haben.",
)

HELD_OUT_SECRETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("fyi the wifi pw at my parents' place: Garten2019", ("Garten2019",)),
    ("My online banking password is Elefant88 if you need it", ("Elefant88",)),
    ("Remember: door code 4096*", ("4096*",)),
    ("The PIN for my debit card is 5309.", ("5309",)),
    ("here's my visa 4012888888881881 exp 09/29 cvc 321", ("4012888888881881", "321")),
    ("password=Winter#2025 for the test account", ("Winter#2025",)),
    ("the new Slack token is xoxb-1234-5678-abcdefghijkl", ("xoxb-1234-5678-abcdefghijkl",)),
    ("My Netflix password is now pizza4ever", ("pizza4ever",)),
    ("Das Passwort fürs Firmenkonto ist Rheinblick2023!", ("Rheinblick2023",)),
    ("Meine Karten-PIN lautet 7410.", ("7410",)),
    ("Kreditkarte: 5105 1051 0510 5100, Prüfziffer 456", ("5105 1051 0510 5100",)),
    ("Der Schlüsselcode für den Tresor ist 1357", ("1357",)),
    ("Neues Kennwort: Mondschein_7", ("Mondschein_7",)),
    ("Die Geheimzahl meiner EC-Karte ist 2468", ("2468",)),
    ("WLAN-Schlüssel lautet Kaffeetasse99", ("Kaffeetasse99",)),
)

HELD_OUT_BENIGN: tuple[str, ...] = (
    "Which password manager do you recommend?",
    "The password policy says 90 days.",
    "I keep my PIN in my head, not on paper.",
    "My phone number changed to +44 7700 900123.",
    "Order 4532015112830366 is a test order number from the sandbox.",
    "The conference hall seats 1200 people.",
    "Token economy is a topic in my psychology class.",
    "She pinned the photo to the fridge.",
    "Mein neues Passwort ist deutlich länger als das alte.",
    "Das WLAN funktioniert wieder.",
    "Die Kontonummer steht auf der Rechnung.",
    "Wir haben 250 Kunden in Bayern.",
    "Der Code-Review ist für Freitag geplant.",
    "Ich habe die PIN-Sperre aufgehoben.",
    "Seine Telefonnummer ist 089 1234567.",
)

# A second held-out set, written before the rules were widened on the first one's misses (which
# then joined the tuned set as `SECOND_ROUND_*`): the estimate after that round.
HELD_OUT_2_SECRETS: tuple[tuple[str, tuple[str, ...]], ...] = (
    ("btw the garage door code is 7314", ("7314",)),
    ("My gym locker combination: 28-14-03", ("28-14-03",)),
    ("Our office wifi key is Bluebird#44, for the guests", ("Bluebird#44",)),
    ("My password for the tax portal is Kestrel2026", ("Kestrel2026",)),
    ("The safe code is 9182, don't tell anyone", ("9182",)),
    ("The PIN of my SIM card is 6021", ("6021",)),
    ("Use this card for the booking: 3714 496353 98431", ("3714 496353 98431",)),
    ("GitHub token: ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8", ("ghp_A1b2C3d4E5f6G7h8I9j0K1l2M3n4O5p6Q7r8",)),
    ("login is mark.b and the pass is Otter!992", ("Otter!992",)),
    ("the verification code they texted me is 551902", ("551902",)),
    ("Der Code für die Haustür ist 4470", ("4470",)),
    ("Mein Passwort fürs Steuerportal lautet Kranich2026", ("Kranich2026",)),
    ("Das WLAN-Passwort im Büro: Sonnenuhr#12", ("Sonnenuhr#12",)),
    ("Die PIN meiner SIM-Karte ist 3390", ("3390",)),
    ("Der Tresorcode lautet 8642", ("8642",)),
    ("Bitte zahl mit meiner Karte 4111-1111-1111-1111", ("4111-1111-1111-1111",)),
    ("Mein Zugangspasswort für das Intranet ist Eisvogel55", ("Eisvogel55",)),
    ("Die Bestätigungsnummer per SMS war 730215", ("730215",)),
    ("Das Kennwort für den Router lautet jetzt Leuchtturm9", ("Leuchtturm9",)),
    ("Mein Online-Banking-PIN: 40517", ("40517",)),
)

HELD_OUT_2_BENIGN: tuple[str, ...] = (
    "The garage door code needs to be changed by the landlord.",
    "I forgot the combination of my bike lock again.",
    "Our office wifi is slow in the afternoons.",
    "The tax portal asks for a new password every year.",
    "Please remind me to renew my SIM card contract in March.",
    "The booking reference is ABX-4471, flight on 12 May.",
    "The verification took three days longer than promised.",
    "My pass for the museum expires in June.",
    "Invoice 2026-0415 over 1,180 EUR is still open.",
    "She scored 4 out of 5 in the code review.",
    "Der Code der Haustür klemmt, der Hausmeister kommt morgen.",
    "Mein Passwort fürs Steuerportal muss ich bald erneuern.",
    "Das WLAN im Büro fällt öfter aus.",
    "Die PIN-Abfrage am Handy habe ich ausgeschaltet.",
    "Der Tresor im Hotel war zu klein für den Laptop.",
    "Die Karte für das Konzert kostet 49 Euro.",
    "Ich habe das Intranet-Passwort gestern geändert.",
    "Die Bestätigung kam per SMS nach zehn Minuten.",
    "Der Router steht im Flur neben dem Schuhschrank.",
    "Kundennummer 100-234-567, Vertrag Nummer 88123.",
)


# Numbers that pass the Luhn check (`bench.secrets` fills in random ones): named as a business id
# they stay, named as a card they are withheld. Written with the business-id rule (tuned).
ID_CONTEXTS: tuple[str, ...] = (
    "Order {n} shipped on Monday.",
    "Order #{n} was paid with Visa.",
    "Invoice no. {n} is due on 1 March.",
    "The tracking number is {n}.",
    "Tracking number: {n}",
    "Customer {n} asked for a callback.",
    "Reference {n}, contract renewed.",
    "Ticket {n} was closed by support.",
    "Bestellung {n} ist unterwegs.",
    "Bestellnummer: {n}",
    "Rechnungsnr. {n} ist noch offen.",
    "Kundennummer {n} wünscht einen Rückruf.",
    "Sendungsnummer {n} wurde zugestellt.",
    "Auftrag {n} storniert, Zahlung per Kreditkarte erstattet.",
)
CARD_CONTEXTS: tuple[str, ...] = (
    "My card number is {n}.",
    "here's my visa {n} exp 09/29",
    "Pay order 77 with card {n} please.",
    "Use this card for the booking: {n}",
    "Kreditkarte: {n}",
    "Meine Karte ist {n}, gültig bis 10/28.",
    "paid with {n} on Monday",
    "Bitte zahl mit {n}.",
)
